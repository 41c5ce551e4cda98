import CrashHarness
import Foundation
import PersistentOperations

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The lane soak: launches the child `lanes-app` against one store again and again, SIGKILLs
/// it at a moment aimed at one phase of its work, then lets one last launch drain the lanes,
/// and checks the lane contract over the whole journal and the store it left (see
/// ``LaneSoakVerifier``).
///
///     crash-demo lanes-soak [--cycles N] [--count M] [--lanes L] [--seed S] [--directory DIR]
///                           [--attempt-ms MS] [--expires-ms MS]
///
/// Every cycle launches the app with `--count` raised by M, so each launch adds M new messages
/// on top of the backlog, spread over L lanes (``LanePlan``: messages that succeed, retry,
/// fail for good, are cancelled while they wait or while they run, expire, and — in lane 0,
/// which holds on a failure — fail once and are re-queued or purged); every other launch, at
/// random, adds before it restores. The store, the effects journal and the apps' standard
/// error stay in DIR, which must be empty or absent (default: a new temporary directory,
/// deleted when every check passed).
/// Exits 0 when every check passed, 1 otherwise.
struct LaneSoakCommand {
    var cycles = 30
    var count = 8
    var plan = LanePlan()
    var seed = UInt64.random(in: 1...UInt64.max)
    var directory: URL?
    var attemptMilliseconds = 10
    var expiresMilliseconds = 300
    /// High enough that no message is moved aside as a crash loop: the soak's kills are not
    /// the messages' doing.
    static let crashLoopLimit = 1_000

    /// Where in the app's work a kill is aimed.
    enum Phase: String, CaseIterable {
        /// 0–30 ms after the launch: while the process starts, opens the store and restores.
        case restore
        /// On an `ack`: while messages are being added.
        case adds
        /// 0–attempt ms after a `start`: while an attempt runs.
        case attempt
        /// 5–35 ms after an `end … retry`: while a message waits for its retry, keeping its lane.
        case retryWait = "retry-wait"
        /// On an `end` that ends a message's turn: while the lane hands over to its next message.
        case handover
        /// On a `cancel`: between a cancel request and its effect.
        case cancel
        /// 50–400 ms after the launch: wherever the app has got to.
        case late
    }

    /// How one cycle ended.
    enum CycleEnd {
        case killed(Phase)
        /// The aimed-at moment did not come within the time limit; killed anyway.
        case killedLate(Phase)
        /// The app died of a signal that was not the soak's.
        case diedByItself(signal: Int32)
        /// The app finished its work before the kill.
        case exited(status: Int32)
    }

    func run() throws -> Bool {
        let started = Date()
        let workDirectory = directory ?? FileManager.default.temporaryDirectory
            .appendingPathComponent("lanes-soak-\(UUID().uuidString)", isDirectory: true)
        if let directory, FileManager.default.fileExists(atPath: directory.path),
           try !FileManager.default.contentsOfDirectory(atPath: directory.path).isEmpty {
            throw DemoError("--directory \(directory.path) must be an empty directory or not exist yet, so that the checks cover this run only")
        }
        try FileManager.default.createDirectory(at: workDirectory, withIntermediateDirectories: true)
        let store = workDirectory.appendingPathComponent("store", isDirectory: true)
        let effects = workDirectory.appendingPathComponent("effects.txt").path
        let errors = workDirectory.appendingPathComponent("app-stderr.txt").path
        _ = FileManager.default.createFile(atPath: errors, contents: nil)
        print("lanes soak: \(cycles) killed launches then one to drain, \(count) new messages per launch over \(plan.lanes) lanes (\(plan.name(ofLane: 0)) holds on a failure), seed \(seed)")
        print("  directory: \(workDirectory.path)")

        var random = SeededGenerator(seed: seed)
        var ends: [CycleEnd] = []
        var problems: [String] = []
        for cycle in 0..<cycles {
            let phase = Phase.allCases.randomElement(using: &random)!
            let arguments = appArguments(store: store, effects: effects, count: (cycle + 1) * count, addsBeforeRestore: Bool.random(using: &random))
            let end = try runCycle(arguments: arguments, effects: effects, errors: errors, phase: phase, random: &random)
            switch end {
            case .exited(let status) where status != 0:
                problems.append("cycle \(cycle): the app exited with status \(status) (see \(errors))")
            case .diedByItself(let signal):
                problems.append("cycle \(cycle): the app died of signal \(signal) (see \(errors))")
            default:
                break
            }
            ends.append(end)
        }

        // Then let it drain: nothing kills this launch.
        let finalCount = cycles * count
        let last = try SoakCommand.launch(appArguments(store: store, effects: effects, count: finalCount, addsBeforeRestore: false), errors: errors)
        if !SoakCommand.waitForExit(last, timeout: 60) {
            problems.append("the last launch did not finish within 60 s")
        } else if last.terminationReason != .exit || last.terminationStatus != 0 {
            problems.append("the last launch ended with \(last.terminationReason == .exit ? "status" : "signal") \(last.terminationStatus) (see \(errors))")
        }

        let verifier = LaneSoakVerifier(
            events: try LaneJournalEvent.all(at: effects), stored: try Self.storedMessages(in: store), count: finalCount, plan: plan
        )
        problems += verifier.problems
        let onDisk = try ReadOnlyPersistentStore(directory: store)
        let quarantined = try onDisk.quarantinedEntries()
        if !quarantined.isEmpty { problems.append("\(quarantined.count) entries were quarantined: a kill left a damaged record") }

        let tally = verifier.tally
        var killsByPhase: [String: Int] = [:]
        var late = 0
        var exitedEarly = 0
        for end in ends {
            switch end {
            case .killed(let phase): killsByPhase[phase.rawValue, default: 0] += 1
            case .killedLate(let phase): killsByPhase[phase.rawValue, default: 0] += 1; late += 1
            case .diedByItself, .exited: exitedEarly += 1
            }
        }
        let phases = Phase.allCases.map { "\($0.rawValue) \(killsByPhase[$0.rawValue, default: 0])" }.joined(separator: ", ")
        print("""
              kills: \(ends.count - exitedEarly) of \(cycles) launches (\(exitedEarly) finished first); by phase: \(phases) (\(late) after the aimed-at moment did not come within 2 s)
              launches journaled: \(tally.launches) (\(tally.launchesCut) cut by a kill, \(tally.launchesCutMidAttempt) of them with attempts in flight, \(tally.attemptsCut) attempts cut; \(tally.launchesFinished) finished; \(tally.launchesAddingBeforeRestore) added before restoring)
              messages: \(finalCount), acknowledged \(tally.acknowledged); attempts \(tally.attempts), retries \(tally.retries); lanes in flight at once: up to \(tally.mostLanesInFlight)
              outcomes: succeeded \(tally.succeeded), failed for good \(tally.failedForGood), expired \(tally.expired) (\(tally.expiredAfterStarting) after an attempt), cancelled \(tally.cancelled), purged \(tally.purged) (re-queue requests \(tally.requeues)), pending at the end \(tally.pendingAtEnd)
              lane order: \(tally.firstAttemptsChecked) first attempts checked; overlapping attempts: \(tally.overlaps); out of order: \(tally.outOfOrder)
              duration: \(String(format: "%.1f", Date().timeIntervalSince(started))) s
            """)
        if problems.isEmpty {
            print("lanes soak: PASS")
            if directory == nil { try? FileManager.default.removeItem(at: workDirectory) }
            return true
        }
        print("lanes soak: FAIL (\(problems.count) problems; the store and journal are kept in \(workDirectory.path))")
        for problem in problems.prefix(50) { print("  - \(problem)") }
        return false
    }

    private func appArguments(store: URL, effects: String, count: Int, addsBeforeRestore: Bool) -> [String] {
        var arguments = [
            "lanes-app", "--store", store.path, "--effects", effects, "--count", "\(count)", "--lanes", "\(plan.lanes)",
            "--attempt-ms", "\(attemptMilliseconds)", "--expires-ms", "\(expiresMilliseconds)", "--crash-loop-limit", "\(Self.crashLoopLimit)",
        ]
        if addsBeforeRestore { arguments.append("--adds-before-restore") }
        return arguments
    }

    /// Launches the app, waits for the moment `phase` aims at, and kills it.
    private func runCycle(arguments: [String], effects: String, errors: String, phase: Phase, random: inout SeededGenerator) throws -> CycleEnd {
        let tail = SoakJournalTail(path: effects)
        let app = try SoakCommand.launch(arguments, errors: errors)
        if phase != .restore {
            _ = tail.waitForLine(startingWith: "launch ", while: app, until: Date().addingTimeInterval(60))
        }
        let deadline = Date().addingTimeInterval(2)
        var reached = true
        switch phase {
        case .restore:
            usleep(UInt32.random(in: 0...30_000, using: &random))
        case .adds:
            reached = tail.waitForLine(startingWith: "ack ", while: app, until: deadline)
        case .attempt:
            reached = tail.waitForLine(startingWith: "start ", while: app, until: deadline)
            if reached { usleep(UInt32.random(in: 0...UInt32(attemptMilliseconds * 1_000), using: &random)) }
        case .retryWait:
            reached = tail.waitForLine(where: { $0.hasPrefix("end ") && $0.hasSuffix(" retry") }, while: app, until: deadline)
            if reached { usleep(UInt32.random(in: 5_000...35_000, using: &random)) }
        case .handover:
            reached = tail.waitForLine(where: { $0.hasPrefix("end ") && !$0.hasSuffix(" retry") }, while: app, until: deadline)
        case .cancel:
            reached = tail.waitForLine(startingWith: "cancel ", while: app, until: deadline)
        case .late:
            usleep(UInt32.random(in: 50_000...400_000, using: &random))
        }
        // The kill is the soak's when the app still ran; otherwise it exited by itself.
        let sentKill = app.isRunning
        if sentKill {
            kill(app.processIdentifier, SIGKILL)
        }
        app.waitUntilExit()
        if app.terminationReason == .exit {
            return .exited(status: app.terminationStatus)
        }
        if !sentKill || app.terminationStatus != SIGKILL {
            return .diedByItself(signal: app.terminationStatus)
        }
        return reached ? .killed(phase) : .killedLate(phase)
    }

    /// Every lane message the store holds, pending or failed, for the verifier.
    static func storedMessages(in store: URL) throws -> [LaneStoredMessage] {
        let onDisk = try ReadOnlyPersistentStore(directory: store)
        let pending = try onDisk.pendingRecords()
        let failed = try onDisk.failedRecords()
        guard pending.unreadable.isEmpty && failed.unreadable.isEmpty else {
            throw DemoError("the store has unreadable entries: \((pending.unreadable + failed.unreadable).map { "\($0.name): \($0.reason)" })")
        }
        return try (pending.records + failed.records).map { record in
            LaneStoredMessage(
                index: try record.decodePayload(as: LaneMessageOperation.self).index, isFailed: record.area == .failed,
                failureReason: record.failureReason, expirationDate: record.expirationDate, isHoldingLane: record.isHoldingLane
            )
        }
    }
}

extension LaneSoakCommand {
    static let usage = "usage: crash-demo lanes-soak [--cycles N] [--count M] [--lanes L] [--seed S] [--directory DIR] [--attempt-ms MS] [--expires-ms MS]"

    /// Reads the options of `crash-demo lanes-soak`.
    init(arguments: [String]) {
        func number(_ name: String, atLeast minimum: Int = 0) -> Int? {
            guard let text = option(name, in: arguments) else { return nil }
            guard let value = Int(text), value >= minimum else { fail("\(name) needs a whole number of at least \(minimum)\n\(Self.usage)") }
            return value
        }
        if let cycles = number("--cycles") { self.cycles = cycles }
        if let count = number("--count") { self.count = count }
        if let lanes = number("--lanes", atLeast: 1) { plan = LanePlan(lanes: lanes) }
        if let seed = option("--seed", in: arguments) {
            guard let value = UInt64(seed) else { fail("--seed needs a whole number\n\(Self.usage)") }
            self.seed = value
        }
        if let directory = option("--directory", in: arguments) { self.directory = URL(fileURLWithPath: directory) }
        if let milliseconds = number("--attempt-ms", atLeast: 1) { attemptMilliseconds = milliseconds }
        if let milliseconds = number("--expires-ms", atLeast: 1) { expiresMilliseconds = milliseconds }
    }
}

extension LaneAppCommand {
    static let usage = "usage: crash-demo lanes-app --store DIR --effects FILE --count N [--lanes L] [--attempt-ms MS] [--expires-ms MS] [--crash-loop-limit K] [--adds-before-restore]"

    /// Reads the options of `crash-demo lanes-app`.
    init(arguments: [String]) {
        func number(_ name: String, atLeast minimum: Int) -> Int? {
            guard let text = option(name, in: arguments) else { return nil }
            guard let value = Int(text), value >= minimum else { fail("\(name) needs a whole number of at least \(minimum)\n\(Self.usage)") }
            return value
        }
        guard let store = option("--store", in: arguments), let effects = option("--effects", in: arguments),
              let count = number("--count", atLeast: 0) else {
            fail(Self.usage)
        }
        self.init(store: URL(fileURLWithPath: store), effects: effects, count: count)
        if let lanes = number("--lanes", atLeast: 1) { plan = LanePlan(lanes: lanes) }
        if let milliseconds = number("--attempt-ms", atLeast: 1) { attemptMilliseconds = milliseconds }
        if let milliseconds = number("--expires-ms", atLeast: 1) { expiresMilliseconds = milliseconds }
        if let limit = number("--crash-loop-limit", atLeast: 1) { crashLoopLimit = limit }
        addsBeforeRestore = arguments.contains("--adds-before-restore")
    }
}
