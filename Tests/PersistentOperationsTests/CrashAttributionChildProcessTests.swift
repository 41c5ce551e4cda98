import CrashHarness
import Foundation
import Testing
@testable import PersistentOperations

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Crash-loop protection with real processes: a poison operation that crashes its process
/// (a Swift runtime trap) among ordinary ones, kills from outside, and the crash-signal
/// handler passing a crash on to the handler installed before it.
@Suite("Crash-loop protection: child processes", .timeLimit(.minutes(4)), .serialized)
struct CrashAttributionChildProcessTests {
    /// The failed records of a store, by upload index, with their reasons.
    func failedReasons(_ directory: TemporaryDirectory) throws -> [Int: String] {
        var reasons: [Int: String] = [:]
        for record in try RecordStore(directory: directory.store, access: .readOnly).loadFailed().records {
            reasons[try RecordFormat.decodePayload(DemoUploadJob.self, from: record.payload).index] = record.failureReason ?? ""
        }
        return reasons
    }

    @Test func onePoisonOperationAmongTwentyIsCaughtAndNoOrdinaryOneIsMovedAside() async throws {
        // Given, ten times over on a fresh store, an app whose 4-slot queue holds 20 ordinary
        // uploads (every sixth refused for good by its server) and one that crashes the app
        // on every attempt
        let count = 20
        let poison = count
        var crashedLaunchesPerStore: [Int] = []
        for store in 0..<10 {
            let directory = try TemporaryDirectory()
            let effects = directory.url.appendingPathComponent("effects.txt").path
            let arguments = ["app", "--store", directory.store.path, "--effects", effects, "--count", "\(count)", "--crasher"]
            // When it is relaunched until a launch finishes
            let statuses = try await onDedicatedThread { () -> [Int32?] in
                var statuses: [Int32?] = []
                while statuses.last != .some(0), statuses.count < 12 {
                    let app = try ChildApp.launch(arguments)
                    try ChildApp.waitForExit(app, timeout: 60)
                    statuses.append(app.terminationReason == .exit ? app.terminationStatus : nil)
                }
                return statuses
            }
            // Then the store drains within the documented bound: the poison operation crashes
            // at most crashLoopLimit + 1 launches (one of them shared with other attempts)
            let crashed = statuses.filter { $0 == nil }.count
            crashedLaunchesPerStore.append(crashed)
            #expect(statuses.last == .some(0), "store \(store): launches ended \(statuses)")
            #expect(crashed >= 3 && crashed <= 4, "store \(store): \(crashed) crashed launches")
            // And only the poison operation was moved aside by crash-loop protection; every
            // ordinary upload completed or was refused, none was lost
            let reasons = try failedReasons(directory)
            #expect(reasons[poison]?.contains("crashed the process 3 times while its attempt ran alone") == true)
            let movedAside = reasons.filter { $0.key != poison && $0.value.contains("while its attempt ran alone") }
            #expect(movedAside.isEmpty, "store \(store): moved aside \(movedAside)")
            let refused = Set((0..<count).filter { $0 % 6 == 5 })
            #expect(Set(reasons.keys) == refused.union([poison]), "store \(store): failed \(reasons.keys.sorted())")
            let journal = try EffectsJournal(path: effects)
            let done = Set(journal.indices("done"))
            #expect(done == Set(0..<count).subtracting(refused), "store \(store): missing \(Set(0..<count).subtracting(refused).subtracting(done).sorted())")
            #expect(try directory.names(in: "pending").isEmpty)
        }
        print("poison among 20, 10 stores: crashed launches per store \(crashedLaunchesPerStore), 0 ordinary uploads moved aside")
    }

    /// Relaunches the app with a poison upload (`--killer`: it gets the app SIGKILLed on every
    /// attempt) among `count` ordinary ones on a `width`-slot queue, on `stores` fresh stores,
    /// until a launch finishes; checks that only the poison is moved aside and returns, per
    /// store, the launches that started an attempt of it.
    func poisonThatGetsTheAppKilledIsCaught(count: Int, width: Int, stores: Int) async throws -> [Int] {
        let poison = count
        var launchesPerStore: [Int] = []
        for store in 0..<stores {
            let directory = try TemporaryDirectory()
            let effects = directory.url.appendingPathComponent("effects.txt").path
            let arguments = [
                "app", "--store", directory.store.path, "--effects", effects, "--count", "\(count)",
                "--max-concurrent", "\(width)", "--killer",
            ]
            let statuses = try await onDedicatedThread { () -> [Int32?] in
                var statuses: [Int32?] = []
                while statuses.last != .some(0), statuses.count < 12 {
                    let app = try ChildApp.launch(arguments)
                    try ChildApp.waitForExit(app, timeout: 60)
                    statuses.append(app.terminationReason == .exit ? app.terminationStatus : -app.terminationStatus)
                }
                return statuses
            }
            // Then the store drains, every launch before the last killed (SIGKILL: no witness)
            #expect(statuses.last == .some(0), "store \(store): launches ended \(statuses)")
            #expect(statuses.dropLast().allSatisfy { $0 == -SIGKILL }, "store \(store): launches ended \(statuses)")
            // And the poison was moved aside after 3 kills in a row while it ran alone, within
            // 4 launches that started it; no ordinary upload was, and none was lost
            let journal = try EffectsJournal(path: effects)
            var launch = 0
            var launchesWithPoison = Set<Int>()
            for line in journal.lines {
                if line.first == "launch" { launch += 1 }
                if line.first == "start", line.count > 1, Int(line[1]) == poison { launchesWithPoison.insert(launch) }
            }
            launchesPerStore.append(launchesWithPoison.count)
            #expect(launchesWithPoison.count <= 4, "store \(store): \(launchesWithPoison.count) launches started the poison")
            let reasons = try failedReasons(directory)
            #expect(reasons[poison]?.contains("killed 3 times in a row while its attempt ran alone and the app was active") == true)
            let movedAside = reasons.filter { $0.key != poison && $0.value.contains("while its attempt ran alone") }
            #expect(movedAside.isEmpty, "store \(store): moved aside \(movedAside)")
            let refused = Set((0..<count).filter { $0 % 6 == 5 })
            #expect(Set(reasons.keys) == refused.union([poison]), "store \(store): failed \(reasons.keys.sorted())")
            #expect(Set(journal.indices("done")) == Set(0..<count).subtracting(refused))
            // And the ordinary uploads' interrupted attempts spent no retry: each counted at
            // most the two retries its own failures asked for
            for case let line in journal.lines where line.first == "start" && line.count > 3 {
                guard let index = Int(line[1]), index != poison, let retries = Int(line[3].dropFirst("retries=".count)) else { continue }
                #expect(retries <= 2, "store \(store): upload \(index) started with \(retries) retries")
            }
            #expect(try directory.names(in: "pending").isEmpty)
        }
        return launchesPerStore
    }

    @Test func aPoisonThatGetsTheAppKilledAmongTwentyOnAFourSlotQueueIsCaughtEveryTime() async throws {
        // Given, five times over on a fresh store, 20 ordinary uploads on a 4-slot queue and one
        // that gets the app SIGKILLed on every attempt, the app active throughout
        // When it is relaunched until a launch finishes
        let launches = try await poisonThatGetsTheAppKilledIsCaught(count: 20, width: 4, stores: 5)
        // Then (checked per store) it is caught, and no ordinary upload is moved aside
        print("killed poison among 20 on 4 slots, 5 stores: launches that started it per store \(launches), 0 of 100 ordinary uploads moved aside")
    }

    @Test func aPoisonThatGetsTheAppKilledOnASerialQueueIsCaught() async throws {
        // Given, three times over, 6 ordinary uploads and a killing one on a serial queue
        // When it is relaunched until a launch finishes
        let launches = try await poisonThatGetsTheAppKilledIsCaught(count: 6, width: 1, stores: 3)
        // Then (checked per store) it is caught, and no ordinary upload is moved aside
        print("killed poison among 6 on 1 slot, 3 stores: launches that started it per store \(launches)")
    }

    @Test func killsWhileTheAppIsInactiveAreNeverCounted() async throws {
        // Given an app that says it is not active, with 8 ordinary uploads and one that gets it
        // SIGKILLed on every attempt
        let directory = try TemporaryDirectory()
        let effects = directory.url.appendingPathComponent("effects.txt").path
        let count = 8
        let arguments = ["app", "--store", directory.store.path, "--effects", effects, "--count", "\(count)", "--killer", "--inactive"]
        // When it is launched 6 times
        let statuses = try await onDedicatedThread { () -> [Int32?] in
            var statuses: [Int32?] = []
            for _ in 0..<6 {
                let app = try ChildApp.launch(arguments)
                try ChildApp.waitForExit(app, timeout: 60)
                statuses.append(app.terminationReason == .exit ? app.terminationStatus : -app.terminationStatus)
            }
            return statuses
        }
        // Then each launch is killed, and none of its kills counts against anything: nothing
        // is moved aside (the killer stays pending, never isolated), the ordinary uploads progress
        #expect(statuses == Array(repeating: -SIGKILL, count: 6))
        let reasons = try failedReasons(directory)
        #expect(reasons.filter { $0.value.contains("while its attempt ran alone") }.isEmpty)
        let refused = Set((0..<count).filter { $0 % 6 == 5 })
        #expect(Set(reasons.keys).isSubset(of: refused))
        let journal = try EffectsJournal(path: effects)
        #expect(!journal.indices("done").isEmpty)
        let store = try RecordStore(directory: directory.store, access: .readOnly)
        let pending = try store.loadPending().records
        let killer = try #require(try pending.first { try RecordFormat.decodePayload(DemoUploadJob.self, from: $0.payload).index == count })
        #expect(store.suspects()[killer.id].map { !$0.runsAlone && $0.kills == 0 } ?? true)
        #expect(journal.lines.filter { $0.first == "launch" }.dropFirst().allSatisfy { $0.contains("previous=inactive") })
    }

    @Test func killsFromOutsideAtRandomMomentsMoveNothingAside() async throws {
        // Given an app adding 60 uploads of 150 ms attempts on a 4-slot queue, SIGKILLed from
        // outside at a random moment of each of 30 launches in a row (so most kills find
        // four attempts in flight, and some find one alone)
        let directory = try TemporaryDirectory()
        let effects = directory.url.appendingPathComponent("effects.txt").path
        let count = 60
        let kills = 30
        let arguments = ["app", "--store", directory.store.path, "--effects", effects, "--count", "\(count)", "--attempt-ms", "150"]
        // When each launch is killed at a random moment after its first attempt started, then
        // the last is left to run to the end
        try await onDedicatedThread {
            try ChildApp.killRepeatedlyThenFinish(
                arguments, kills: kills, pause: 0...300_000, seed: 0x5EED_0013, timeout: 120, afterFirstAttemptIn: effects
            )
        }
        // Then no upload was moved aside by crash-loop protection: the failed area holds
        // exactly the uploads their server refused, and every other upload completed
        let reasons = try failedReasons(directory)
        let refused = Set((0..<count).filter { $0 % 6 == 5 })
        #expect(reasons.filter { $0.value.contains("while its attempt ran alone") }.isEmpty)
        #expect(Set(reasons.keys) == refused)
        let journal = try EffectsJournal(path: effects)
        #expect(Set(journal.indices("done")) == Set(0..<count).subtracting(refused))
        // And the kills did find attempts in flight (the test exercised what it claims)
        let interrupted = try Self.killedLaunchesWithAnAttemptInFlight(journal)
        #expect(interrupted >= kills / 2, "only \(interrupted) kills interrupted an attempt")
        print("kills from outside: \(kills) SIGKILLs, \(interrupted) of them with attempts in flight, 0 uploads moved aside")
    }

    /// Launches that ended (a later launch followed: they were killed) with an attempt started
    /// and not ended in the journal: each such kill interrupted an attempt. Counted in the
    /// killed launch itself, so it does not matter when the interrupted attempt runs again (the
    /// operations in flight at a kill run alone only once the other work is done).
    static func killedLaunchesWithAnAttemptInFlight(_ journal: EffectsJournal) throws -> Int {
        var interrupted = 0
        var inFlight = Set<Int>()
        var hasLaunched = false
        for line in journal.lines {
            guard let word = line.first else { continue }
            switch word {
            case "launch":
                if hasLaunched, !inFlight.isEmpty { interrupted += 1 }
                hasLaunched = true
                inFlight = []
            case "start":
                guard line.count > 1, let index = Int(line[1]) else { continue }
                inFlight.insert(index)
            case "done", "retry", "fail":
                guard line.count > 1, let index = Int(line[1]) else { continue }
                inFlight.remove(index)
            default:
                continue
            }
        }
        return interrupted
    }

    @Test func theCrashSignalHandlerNotesTheCrashAndPassesItOnToTheHandlerInstalledBefore() async throws {
        // Given a process that installs its own SIGSEGV handler (exits with 42), then opens a
        // store, then makes a bad memory access
        let directory = try TemporaryDirectory()
        let result = try await onDedicatedThread {
            try ChildApp.run("crash-demo", ["chained-crash", "--store", directory.store.path])
        }
        // Then its own handler ran (the exit status), after the queue's noted the crash
        #expect(result.status == 42)
        #expect(result.error.contains("the earlier handler ran"))
        let launch = try String(contentsOfFile: directory.path("attempts", "launch"), encoding: .utf8)
        #expect(launch == "witness on\ncrashed \(SIGSEGV)\n")
    }

    @Test func aCrashWithoutAnEarlierHandlerStillEndsTheProcessWithItsSignal() async throws {
        // Given the app with a poison operation and no handler of its own
        let directory = try TemporaryDirectory()
        let effects = directory.url.appendingPathComponent("effects.txt").path
        let app = try await onDedicatedThread { () -> Process in
            let app = try ChildApp.launch(["app", "--store", directory.store.path, "--effects", effects, "--count", "0", "--crasher"])
            try ChildApp.waitForExit(app, timeout: 30)
            return app
        }
        // Then it dies of its trap (SIGILL or SIGTRAP, by architecture), as it would without
        // the queue, and the launch file says so
        #expect(app.terminationReason == .uncaughtSignal)
        #expect([SIGILL, SIGTRAP].contains(app.terminationStatus))
        let launch = try String(contentsOfFile: directory.path("attempts", "launch"), encoding: .utf8)
        #expect(launch == "witness on\ncrashed \(app.terminationStatus)\n")
    }
}
