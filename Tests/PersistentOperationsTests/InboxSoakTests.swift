import CrashHarness
import Foundation
import Testing
@testable import PersistentOperations

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The inbox under SIGKILL, with two kinds of process at once: producers (`crash-demo
/// inbox-producer`, app extensions) add messages through the store's inbox without its lock,
/// while the owner (`crash-demo inbox-owner`, the app) holds the store and takes the letters
/// in, at its restore and as they arrive. Each process is killed at random moments and
/// relaunched, independently of the others; the effects files the processes write (each line
/// synced before they go on) and the store left at the end show what was lost, stored twice,
/// or run out of a producer's order.
@Suite("Inbox: producers and the app that takes their letters in, killed and relaunched", .serialized, .timeLimit(.minutes(3)))
struct InboxSoakTests {
    static let producers = ["p1", "p2"]
    static let messages = 150
    /// Kills of each process, at least.
    static let kills = 10
    /// How long after a launch's first effects line it is killed, in microseconds.
    static let pause: ClosedRange<UInt32> = 2_000...80_000
    /// The most a producer waits between two adds, in milliseconds (a random part of it), so
    /// that its adds spread over many launches of the owner.
    static let producerPause = 10

    @Test(arguments: [7, 2_026] as [UInt64])
    func producersAndTheOwnerKilledAtRandomMomentsLoseNoMessageStoreNoneTwiceAndKeepEachProducersOrder(seed: UInt64) async throws {
        // Given a store, its owner (an app) and two producers (app extensions) of 150 messages
        // each, every producer's messages added through the inbox in a lane named after it,
        // without an idempotency key, each with a nonce drawn for that add, 0 to 10 ms apart
        let directory = try TemporaryDirectory()
        let store = directory.store.path
        let ownerEffects = directory.url.appendingPathComponent("owner.txt").path
        let ownerOutput = directory.url.appendingPathComponent("owner-output.txt").path
        let effects = Dictionary(uniqueKeysWithValues: Self.producers.map { ($0, directory.url.appendingPathComponent("\($0).txt").path) })
        let ownerArguments = ["inbox-owner", "--store", store, "--effects", ownerEffects]
        let running = RunningProducers(Self.producers)
        let deadline = Date().addingTimeInterval(120)

        // When the three run at once, each SIGKILLed at random moments (2 to 80 ms after a
        // launch's first line; every other owner launch after its restore instead) and
        // relaunched — each producer at least 10 times before it may send the rest, the owner
        // at least 10 times and for as long as a producer runs
        let kills = try await withThrowingTaskGroup(of: (String, Int).self) { group in
            group.addTask {
                let kills = try await onDedicatedThread {
                    // Every other launch is killed once it has restored: while it runs attempts
                    // and takes letters in as they arrive; the others while they may restore.
                    try Self.killRepeatedly(
                        ownerArguments, effects: ownerEffects, output: ownerOutput, seed: seed, deadline: deadline,
                        aim: { $0 % 2 == 1 ? "restored" : nil }
                    ) { kills in
                        running.areRunning || kills < Self.kills
                    }
                }
                return ("owner", kills)
            }
            for (index, producer) in Self.producers.enumerated() {
                let producerEffects = effects[producer]!
                let output = directory.url.appendingPathComponent("\(producer)-output.txt").path
                let arguments = [
                    "inbox-producer", "--store", store, "--effects", producerEffects, "--producer", producer, "--messages", "\(Self.messages)",
                    "--pause-ms", "\(Self.producerPause)",
                ]
                group.addTask {
                    let kills = try await onDedicatedThread {
                        defer { running.finished(producer) }
                        let kills = try Self.killRepeatedly(
                            arguments, effects: producerEffects, output: output, seed: seed &* 31 &+ UInt64(index + 1), deadline: deadline
                        ) { $0 < Self.kills }
                        try Self.runToTheEnd(arguments, output: output, timeout: 60)
                        return kills
                    }
                    return (producer, kills)
                }
            }
            var kills: [String: Int] = [:]
            for try await (name, count) in group { kills[name] = count }
            return kills
        }
        // And then the owner runs, without kills, until nothing is pending and no letter waits
        try await onDedicatedThread {
            try Self.runToTheEnd(ownerArguments + ["--until-idle"], output: ownerOutput, timeout: 60)
        }

        // Then every process was killed at least 10 times, each producer sent everything and
        // acknowledged each message once, and the owner ended idle
        for name in ["owner"] + Self.producers {
            #expect(kills[name, default: 0] >= Self.kills, "\(name) was killed \(kills[name, default: 0]) times")
        }
        let sent = try Dictionary(uniqueKeysWithValues: Self.producers.map { ($0, try ProducerJournal(path: effects[$0]!)) })
        for (producer, journal) in sent {
            #expect(journal.isDone, "\(producer) did not write done")
            #expect(journal.acknowledged.values.sorted() == Array(1...Self.messages), "\(producer) acknowledged \(journal.acknowledged.count) adds")
            // (A send without its ack is only ever the last of a launch: the one a kill cut.)
            #expect(journal.unacknowledged == journal.cut, "\(producer): sends not acknowledged that no kill cut")
        }
        let owner = try OwnerJournal(path: ownerEffects)
        #expect(owner.isIdle, "the owner did not write idle: \(Self.tail(of: ownerOutput))")
        // (Half its kills came once it had restored, while it took letters in as they arrived.)
        #expect(owner.killedAfterRestore >= kills["owner", default: 0] / 2)

        // And no stray: every run is of an add a producer made — acknowledged, or the last add
        // of a launch killed before its ack (a letter may be left by an add that never
        // returned) — with the message of that add, one of 1...150
        let stray = owner.runs.filter { run in
            guard let journal = sent[String(run.producer)], let message = journal.sent[run.nonce],
                  journal.acknowledged[run.nonce] != nil || journal.cut.contains(run.nonce) else { return true }
            return message != run.message || !(1...Self.messages).contains(run.message)
        }
        #expect(stray.isEmpty, "runs of adds no producer made: \(Array(stray.prefix(10)))")
        // And 0 lost: every acknowledged add ran
        for (producer, journal) in sent {
            let lost = journal.acknowledged.filter { !owner.ran.contains("\(producer) \($0.key)") }
            #expect(lost.isEmpty, "\(producer): acknowledged adds that never ran (messages): \(Array(lost.values.sorted().prefix(20)))")
        }
        // And 0 duplicated: every add ran as one record, however often an owner kill made it
        // run again (at least once; never twice in one launch); an add taken in twice would run
        // as two records
        let recordsByAdd = Dictionary(grouping: owner.runs, by: \.add).mapValues { Set($0.map(\.record)) }
        let duplicated = recordsByAdd.filter { $0.value.count != 1 }.sorted { $0.key < $1.key }.map { "\($0.key): \($0.value.sorted())" }
        #expect(duplicated.isEmpty, "adds stored as more than one record: \(Array(duplicated.prefix(10)))")
        let addsByRecord = Dictionary(grouping: owner.runs, by: \.record).mapValues { Set($0.map(\.add)) }
        let shared = addsByRecord.filter { $0.value.count != 1 }.map { "\($0.key): \($0.value.sorted())" }
        #expect(shared.isEmpty, "records that ran as more than one add: \(Array(shared.prefix(10)))")
        #expect(addsByRecord["untracked"] == nil, "attempts of operations the queue did not track")
        #expect(owner.ranTwiceInOneLaunch.isEmpty, "adds that ran twice in one launch: \(Array(owner.ranTwiceInOneLaunch.prefix(10)))")
        // And each producer's order held: the first runs of its adds come in the order it made
        // them (its lane runs one at a time, in enqueue order), so their messages never decrease
        for (producer, journal) in sent {
            let order = owner.firstRuns.filter { $0.producer == producer }.compactMap { run in
                journal.position[run.nonce].map { (message: run.message, position: $0) }
            }
            let outOfOrder = zip(order, order.dropFirst()).filter { earlier, later in
                later.message < earlier.message || later.position <= earlier.position
            }.map { earlier, later in "\(earlier.message) before \(later.message)" }
            #expect(outOfOrder.isEmpty, "\(producer)'s messages ran out of order: \(Array(outOfOrder.prefix(10)))")
        }
        // And nothing is left: no record pending or failed, no letter waiting or set aside
        #expect(try RecordStore(directory: directory.store, access: .readOnly).loadPending().records.isEmpty)
        #expect(try ReadOnlyPersistentStore(directory: directory.store).failedRecords().records.isEmpty)
        #expect(PersistentOperationInbox(directory: directory.store).waitingCount == 0)
        let inbox = try FileManager.default.contentsOfDirectory(atPath: directory.path("inbox"))
        #expect(inbox.filter { $0.hasSuffix(".rejected") }.isEmpty, "letters set aside: \(inbox.sorted())")

        let names = ["owner"] + Self.producers
        let launches = names.map { "\($0) \($0 == "owner" ? owner.launches : sent[$0]!.launches)" }.joined(separator: ", ")
        let cut = sent.values.reduce(0) { $0 + $1.cut.count }
        let resent = sent.reduce(0) { total, entry in total + entry.value.cut.filter { owner.ran.contains("\(entry.key) \($0)") }.count }
        print(
            "inbox soak (seed \(seed)): launches \(launches); kills \(names.map { "\($0) \(kills[$0, default: 0])" }.joined(separator: ", "))"
                + "; \(Self.producers.count * Self.messages) messages acknowledged; \(cut) adds cut by a kill before their ack, "
                + "\(resent) of them stored (the message sent again); \(owner.runs.count) runs, "
                + "\(owner.attempts.values.filter { $0 > 1 }.count) adds ran again after an owner kill; "
                + "\(owner.runsBeforeIdleLaunch) runs in killed owner launches, \(owner.killedAfterRestore) owner launches killed after their restore"
        )
    }

    /// Launches crash-demo with `arguments` and SIGKILLs each launch a random pause (drawn from
    /// ``pause`` with `seed`) after its first line in `effects` — or, when `aim(launch)` names
    /// a later line, after that line — as long as `goesOn(kills so far)`; returns the number of
    /// kills. (Each pause counts from a line, however slowly the process starts.) A launch that
    /// exits by itself before its kill ends the loop (a producer that sent everything) or, with
    /// an error, throws. Blocks: call it inside ``onDedicatedThread(_:)``.
    static func killRepeatedly(
        _ arguments: [String], effects: String, output: String, seed: UInt64, deadline: Date,
        aim: (Int) -> String? = { _ in nil }, while goesOn: (Int) -> Bool
    ) throws -> Int {
        var random = SeededGenerator(seed: seed)
        var kills = 0
        var launches = 0
        while goesOn(kills) {
            guard Date() < deadline else { throw ChildAppError("\(arguments[0]) was still being killed at the deadline, after \(kills) kills") }
            let app = try launch(arguments, output: output)
            let first = "launch pid=\(app.processIdentifier)\n"
            let later = aim(launches).map { "\n\($0)\n" }
            launches += 1
            // The line to count from, written by this launch (at most 20 s).
            func hasWritten() -> Bool {
                let text = (try? String(contentsOfFile: effects, encoding: .utf8)) ?? ""
                guard let launch = text.range(of: first) else { return false }
                guard let later else { return true }
                return text[text.index(before: launch.upperBound)...].contains(later)
            }
            let lineDeadline = Date().addingTimeInterval(20)
            while app.isRunning, Date() < lineDeadline, !hasWritten() {
                usleep(1_000)
            }
            usleep(UInt32.random(in: pause, using: &random))
            guard app.isRunning else {
                app.waitUntilExit()
                guard app.terminationReason == .exit, app.terminationStatus == 0 else {
                    throw ChildAppError("\(arguments[0]) ended with \(app.terminationStatus) before its kill: \(tail(of: output))")
                }
                return kills
            }
            kill(app.processIdentifier, SIGKILL)
            app.waitUntilExit()
            if app.terminationReason == .uncaughtSignal { kills += 1 }
        }
        return kills
    }

    /// Launches crash-demo with `arguments` and waits for it to exit with 0. Blocks.
    static func runToTheEnd(_ arguments: [String], output: String, timeout: TimeInterval) throws {
        let app = try launch(arguments, output: output)
        try ChildApp.waitForExit(app, timeout: timeout)
        guard app.terminationReason == .exit, app.terminationStatus == 0 else {
            throw ChildAppError("\(arguments[0]) ended with \(app.terminationStatus): \(tail(of: output))")
        }
    }

    /// Starts crash-demo with `arguments`, its output appended to the file at `output`.
    static func launch(_ arguments: [String], output: String) throws -> Process {
        if !FileManager.default.fileExists(atPath: output) { _ = FileManager.default.createFile(atPath: output, contents: nil) }
        guard let handle = FileHandle(forWritingAtPath: output) else { throw ChildAppError("cannot open \(output)") }
        defer { try? handle.close() }
        handle.seekToEndOfFile()
        return try ChildApp.launch(arguments, output: handle)
    }

    /// The last lines a child printed, for failure messages.
    static func tail(of output: String) -> String {
        String(((try? String(contentsOfFile: output, encoding: .utf8)) ?? "").suffix(2_000))
    }
}

/// The producers still sending, shared by the threads that drive the processes.
/// `@unchecked Sendable`: `names` is read and written under `lock` only.
private final class RunningProducers: @unchecked Sendable {
    private let lock = NSLock()
    private var names: Set<String>

    init(_ names: [String]) {
        self.names = Set(names)
    }

    func finished(_ name: String) {
        lock.withLock { _ = names.remove(name) }
    }

    var areRunning: Bool {
        lock.withLock { !names.isEmpty }
    }
}

/// What a producer's effects file says: its launches, and each add it made (`send`), by nonce.
private struct ProducerJournal {
    var launches = 0
    /// The message of each add, by nonce.
    var sent: [Substring: Int] = [:]
    /// Each add's position in the order the producer made them, by nonce.
    var position: [Substring: Int] = [:]
    /// The message of each acknowledged add, by nonce.
    var acknowledged: [Substring: Int] = [:]
    /// The adds that are the last of their launch and were not acknowledged: a kill cut them.
    var cut: Set<Substring> = []
    var isDone = false

    var unacknowledged: Set<Substring> {
        Set(sent.keys).subtracting(acknowledged.keys)
    }

    init(path: String) throws {
        var last: Substring?
        func endLaunch() {
            if let last, acknowledged[last] == nil { cut.insert(last) }
            last = nil
        }
        for line in try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n") {
            let fields = line.split(separator: " ")
            switch fields.first {
            case "launch":
                endLaunch()
                launches += 1
            case "send" where fields.count == 3:
                guard let message = Int(fields[1]) else { continue }
                sent[fields[2]] = message
                position[fields[2]] = position.count
                last = fields[2]
            case "ack" where fields.count == 3:
                guard let message = Int(fields[1]) else { continue }
                acknowledged[fields[2]] = message
            case "done":
                isDone = true
            default:
                continue
            }
        }
        endLaunch()
    }
}

/// What the owner's effects file says: its launches and the attempts it ran, in order.
private struct OwnerJournal {
    struct Run: CustomStringConvertible {
        var producer: Substring
        var message: Int
        var nonce: Substring
        var record: Substring
        /// The add it is of: producer, message and nonce.
        var add: String { "\(producer) \(message) \(nonce)" }
        var description: String { "\(add) \(record)" }
    }

    var launches = 0
    var runs: [Run] = []
    /// The first run of each add, in order.
    var firstRuns: [Run] = []
    /// The attempts of each add, by producer and nonce (`"p1 3fa2c9e1"`).
    var attempts: [String: Int] = [:]
    /// The runs before the last launch (the one that ran until idle).
    var runsBeforeIdleLaunch = 0
    /// The launches before the last that restored before their kill.
    var killedAfterRestore = 0
    /// The adds that ran twice in one launch (each attempt succeeds: none may).
    var ranTwiceInOneLaunch: [String] = []
    var isIdle = false

    /// The adds that ran, by producer and nonce.
    var ran: Set<String> { Set(attempts.keys) }

    init(path: String) throws {
        var runsBeforeLastLaunch = 0
        var restores = 0
        var ranInThisLaunch: Set<String> = []
        for line in try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n") {
            let fields = line.split(separator: " ")
            switch fields.first {
            case "launch":
                launches += 1
                runsBeforeLastLaunch = runs.count
                killedAfterRestore = restores
                ranInThisLaunch = []
            case "run" where fields.count == 5:
                guard let message = Int(fields[2]) else { continue }
                let run = Run(producer: fields[1], message: message, nonce: fields[3], record: fields[4])
                runs.append(run)
                if !ranInThisLaunch.insert(run.add).inserted { ranTwiceInOneLaunch.append(run.add) }
                let add = "\(run.producer) \(run.nonce)"
                if attempts[add] == nil { firstRuns.append(run) }
                attempts[add, default: 0] += 1
            case "restored":
                restores += 1
            case "idle":
                isIdle = true
            default:
                continue
            }
        }
        runsBeforeIdleLaunch = runsBeforeLastLaunch
    }
}
