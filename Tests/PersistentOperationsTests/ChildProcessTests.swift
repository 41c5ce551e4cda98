import CrashHarness
import Foundation
import Testing
@testable import PersistentOperations

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Real processes: a child app is SIGKILLed at random moments and relaunched; two processes
/// contend for one store.
@Suite("Child processes", .timeLimit(.minutes(3)), .serialized)
struct ChildProcessTests {
    @Test func killedAtRandomMomentsAndRelaunchedTheAppLosesNothingAndRepeatsNothingCompleted() async throws {
        // Given a child app adding 30 uploads that succeed, retry (counted and uncounted) or
        // fail for good, killed with SIGKILL at random moments over 12 launches
        let directory = try TemporaryDirectory()
        let store = directory.store.path
        let effects = directory.url.appendingPathComponent("effects.txt").path
        let count = 30
        let kills = 12
        let arguments = ["app", "--store", store, "--effects", effects, "--count", "\(count)", "--crash-loop-limit", "1000"]
        // When it is finally left to run to the end
        try await onDedicatedThread {
            try ChildApp.killRepeatedlyThenFinish(arguments, kills: kills, pause: 30_000...350_000, seed: 0xC0FFEE, timeout: 60)
        }
        let journal = try EffectsJournal(path: effects)
        let failedIndices = try RecordStore(directory: directory.store, access: .readOnly).loadFailed().records
            .map { try RecordFormat.decodePayload(DemoUploadJob.self, from: $0.payload).index }
        let summary = try Self.verify(journal, count: count, failedIndices: failedIndices)
        print("crash test: \(journal.launches) launches (\(kills) killed), \(summary)")
        // And the store is clean: nothing pending, no temporary file, and it opens
        #expect(try directory.names(in: "pending").isEmpty)
        #expect(try !directory.names(in: "failed").contains(where: StoreLayout.isTemporaryFileName))
        _ = try RecordStore(directory: directory.store)
    }

    /// Checks the at-least-once contract on a journal; returns the tally.
    ///
    /// `crashLooped` are the uploads that sit in the failed area because an attempt of theirs
    /// was in flight at too many consecutive kills (the crash soak); they count as not lost.
    /// Only the independent uploads are checked here; the albums' graph nodes are checked by
    /// ``OperationGraphCrashTests/verifyGraphs(_:failed:albums:allowsCrashLoops:)``.
    static func verify(_ journal: EffectsJournal, count: Int, failedIndices: [Int], crashLooped: Set<Int> = []) throws -> String {
        let failedIndices = failedIndices.filter { AlbumGraph.node(of: $0) == nil }
        let crashLooped = crashLooped.filter { AlbumGraph.node(of: $0) == nil }
        // The last launch finished (events of its last operations may be journaled after it)
        let lastLaunch = journal.lines.lastIndex { $0.first == "launch" } ?? journal.lines.endIndex
        #expect(journal.lines[lastLaunch...].contains(["finished"]))
        let acknowledged = Set(journal.indices("ack").filter { AlbumGraph.node(of: $0) == nil })
        let done = journal.indices("done").filter { AlbumGraph.node(of: $0) == nil }
        let refused = Set((0..<count).filter { $0 % 6 == 5 }).subtracting(crashLooped)
        // Every operation was acknowledged (the last launch adds what earlier ones did not)
        #expect(acknowledged.union(done).union(failedIndices) == Set(0..<count))
        // Every acknowledged operation completed, or failed for good and sits in the failed area
        var lost: [Int] = []
        for index in 0..<count where acknowledged.contains(index) {
            if crashLooped.contains(index) {
                #expect(failedIndices.contains(index), "crash-looped operation \(index) should be in the failed area")
            } else if refused.contains(index) {
                #expect(failedIndices.contains(index), "operation \(index) should be in the failed area")
                #expect(!done.contains(index))
            } else if !done.contains(index) {
                lost.append(index)
            }
        }
        #expect(lost.isEmpty, "lost: \(lost)")
        #expect(Set(failedIndices) == refused.union(crashLooped))
        // No operation started again once its record was removed; retry and attempt counts
        // never went backwards; a second completion only across a kill (crash-demo's rules)
        var contract = ContractReplay()
        for event in journal.events { contract.observe(event) }
        #expect(contract.violations.isEmpty, "\(contract.violations)")
        let ranTwice = contract.ranTwice
        return "\(acknowledged.count) acknowledged, \(Set(done).count) completed, \(failedIndices.count) failed, \(lost.count) lost, \(ranTwice.count) ran twice (in flight at a kill)"
    }

    @Test func anOperationThatKillsItsProcessEveryAttemptIsMovedToFailedAfterThreeCrashes() async throws {
        // Given an app whose one operation SIGKILLs the process on every attempt
        let directory = try TemporaryDirectory()
        let effects = directory.url.appendingPathComponent("effects.txt").path
        let arguments = ["app", "--store", directory.store.path, "--effects", effects, "--count", "0", "--crasher"]
        let statuses = try await onDedicatedThread { () -> [String] in
            var statuses: [String] = []
            for _ in 0..<4 {
                let app = try ChildApp.launch(arguments)
                try ChildApp.waitForExit(app, timeout: 30)
                statuses.append(app.terminationReason == .uncaughtSignal ? "killed" : "exit \(app.terminationStatus)")
            }
            return statuses
        }
        // Then three launches die, and the fourth moves it to the failed area and finishes
        #expect(statuses == ["killed", "killed", "killed", "exit 0"])
        let journal = try EffectsJournal(path: effects)
        #expect(journal.indices("start").count == 3)
        let failed = try RecordStore(directory: directory.store, access: .readOnly).loadFailed().records
        #expect(failed.count == 1)
        #expect(failed.first?.failureReason?.contains("crashed the process 3 times") == true)
        #expect(try directory.names(in: "pending").isEmpty)
    }

    @Test func aSecondProcessGetsLockedUntilTheHolderIsKilled() async throws {
        // Given another process holding the store
        let directory = try TemporaryDirectory()
        let pipe = Pipe()
        let holder = try ChildApp.launch(["hold", "--store", directory.store.path], output: pipe.fileHandleForWriting)
        let line = try await onDedicatedThread { () -> String in
            var bytes = Data()
            while !bytes.contains(UInt8(ascii: "\n")) {
                let chunk = pipe.fileHandleForReading.availableData
                if chunk.isEmpty { break }
                bytes.append(chunk)
            }
            return String(decoding: bytes, as: UTF8.self)
        }
        #expect(line.hasPrefix("holding"))
        // When this process opens it, it gets a clear `locked` error
        #expect {
            _ = try PersistentOperationQueue(directory: directory.store)
        } throws: { error in
            guard let error = error as? PersistenceError else { return false }
            return error.code == .locked && error.message.contains("\(holder.processIdentifier)")
        }
        // And once the holder is SIGKILLed, the OS has released its lock
        kill(holder.processIdentifier, SIGKILL)
        _ = try await onDedicatedThread { () -> Bool in holder.waitUntilExit(); return true }
        _ = try PersistentOperationQueue(directory: directory.store)
    }
}
