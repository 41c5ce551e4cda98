import CrashHarness
import Foundation
import Testing
@testable import PersistentOperations

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Operation graphs across real SIGKILLs: a child app adds albums (create ← photos ← publish,
/// as `addOperations` batches and as single adds) and runs them while it is killed at random
/// moments; the checks read its fsynced effects journal and the store it leaves.
@Suite("Child processes: operation graphs", .timeLimit(.minutes(3)), .serialized)
struct OperationGraphCrashTests {
    static let kills = 16
    static let albumsPerLaunch = 2

    @Test func killedAtRandomMomentsWhileAddingAndRunningGraphsDependentsWaitForTheirPrerequisitesAndBatchesStayWhole() async throws {
        // Given a child app that adds two more albums at each launch (one as a batch, one node
        // by node) whose "create album" and photos retry before they succeed, killed with SIGKILL
        // at a random moment of each of 16 launches (while it restores, adds or runs)
        let directory = try TemporaryDirectory()
        let effects = directory.url.appendingPathComponent("effects.txt").path
        @Sendable func arguments(albums: Int) -> [String] {
            ["app", "--store", directory.store.path, "--effects", effects, "--count", "0", "--albums", "\(albums)",
             "--crash-loop-limit", "1000", "--attempt-ms", "20"]
        }
        let moments = try await onDedicatedThread { () -> [String: Int] in
            var random = SeededGenerator(seed: 0x6EA9)
            var moments: [String: Int] = [:]
            let tail = JournalTail(path: effects)
            for launch in 0..<Self.kills {
                _ = tail.newEvents()
                let app = try ChildApp.launch(arguments(albums: (launch + 1) * Self.albumsPerLaunch))
                // The kills take turns: at a random moment, just after the launch journals its
                // first graph add (a batch or a single add under way), and during an attempt.
                let moment: String
                switch launch % 3 {
                case 0:
                    moment = "random"
                    usleep(UInt32.random(in: 2_000...300_000, using: &random))
                case 1:
                    moment = Self.wait(for: { if case .adding = $0 { true } else { false } }, in: tail, while: app) ? "adding" : "late"
                    usleep(UInt32.random(in: 0...3_000, using: &random))
                default:
                    moment = Self.wait(for: { if case .started = $0 { true } else { false } }, in: tail, while: app) ? "attempt" : "late"
                    usleep(UInt32.random(in: 0...20_000, using: &random))
                }
                moments[moment, default: 0] += 1
                kill(app.processIdentifier, SIGKILL)
                app.waitUntilExit()
            }
            // When it is finally left to run to the end
            let last = try ChildApp.launch(arguments(albums: Self.kills * Self.albumsPerLaunch))
            try ChildApp.waitForExit(last, timeout: 60)
            guard last.terminationReason == .exit, last.terminationStatus == 0 else {
                throw ChildAppError("the last launch ended with \(last.terminationReason == .exit ? "status" : "signal") \(last.terminationStatus)")
            }
            return moments
        }

        // Then the journal and the store keep the graph contract
        let journal = try EffectsJournal(path: effects)
        let failed = try RecordStore(directory: directory.store, access: .readOnly).loadFailed().records
        let summary = try Self.verifyGraphs(journal, failed: failed, albums: Self.kills * Self.albumsPerLaunch)
        print("graph crash test: \(journal.launches) launches (\(Self.kills) killed: \(moments.sorted { $0.key < $1.key }.map { "\($0.value) \($0.key)" }.joined(separator: ", "))), \(summary)")
        // And the store drained: nothing pending, only the expected failures in the failed area
        #expect(try directory.names(in: "pending").isEmpty)
        #expect(try !directory.names(in: "failed").contains(where: StoreLayout.isTemporaryFileName))
        #expect(try directory.names(in: "quarantine").isEmpty)
    }

    /// Follows the journal until an event matching `isMatch` is appended while `app` runs (at
    /// most 5 s); returns whether one was.
    static func wait(for isMatch: (JournalEvent) -> Bool, in tail: JournalTail, while app: Process) -> Bool {
        let deadline = Date().addingTimeInterval(5)
        while app.isRunning, Date() < deadline {
            if tail.newEvents().contains(where: isMatch) { return true }
            usleep(200)
        }
        return false
    }

    /// Checks the graph contract on a child app's journal and the failed area it left, for
    /// `albums` albums; returns a summary. `crashLooped` allows nodes moved aside by crash-loop
    /// protection (and, with them, their dependents).
    static func verifyGraphs(_ journal: EffectsJournal, failed: [OperationRecord], albums: Int, allowsCrashLoops: Bool = false) throws -> String {
        // The last launch finished (events of its last operations may be journaled after it)
        let lastLaunch = journal.lines.lastIndex { $0.first == "launch" } ?? journal.lines.endIndex
        #expect(journal.lines[lastLaunch...].contains(["finished"]))
        // No attempt started before each of its prerequisites' success was journaled, and no
        // launch restored part of a batch (with the other at-least-once rules)
        var contract = ContractReplay()
        for event in journal.events { contract.observe(event) }
        #expect(contract.startsBeforePrerequisites == 0)
        #expect(contract.partlyRestoredBatches == 0)
        #expect(contract.violations.isEmpty, "\(contract.violations.prefix(20))")

        var failedByIndex: [Int: OperationRecord] = [:]
        var indexByID: [String: Int] = [:]
        for record in failed {
            let index = try RecordFormat.decodePayload(DemoUploadJob.self, from: record.payload).index
            guard AlbumGraph.node(of: index) != nil else { continue }
            #expect(failedByIndex[index] == nil, "\(AlbumGraph.name(of: index)) sits twice in the failed area")
            failedByIndex[index] = record
            indexByID[record.id] = index
        }
        func isCrashLooped(_ index: Int) -> Bool {
            allowsCrashLoops && failedByIndex[index]?.failureReason?.contains("while its attempt ran alone") == true
        }
        var completed = 0, refused = 0, failedWithPrerequisite = 0, notAdded = 0, crashLooped = 0
        for album in 0..<albums {
            for role in AlbumGraph.roles {
                let index = AlbumGraph.index(album: album, role: role)
                let name = AlbumGraph.name(of: index)
                let prerequisites = AlbumGraph.prerequisites(album: album, role: role)
                if contract.completed.contains(index) {
                    completed += 1
                    #expect(failedByIndex[index] == nil || isCrashLooped(index), "\(name) completed but sits in the failed area")
                } else if let record = failedByIndex[index] {
                    if let prerequisite = record.failedPrerequisite {
                        // Failed because a prerequisite failed: that one is its prerequisite, in the failed area
                        failedWithPrerequisite += 1
                        let cause = try #require(indexByID[prerequisite], "\(name) names prerequisite \(prerequisite), not in the failed area")
                        #expect(prerequisites.contains(cause), "\(name) failed naming \(AlbumGraph.name(of: cause)), not one of its prerequisites")
                    } else if isCrashLooped(index) {
                        crashLooped += 1
                    } else {
                        refused += 1
                        #expect(AlbumGraph.isRefused(album: album, role: role), "\(name) failed for good: \(record.failureReason ?? "")")
                    }
                    #expect(allowsCrashLoops || !AlbumGraph.canSucceed(index), "\(name), which can succeed, failed: \(record.failureReason ?? "")")
                } else if contract.skipped.contains(index) && !contract.stored.contains(index) {
                    // Not added because a prerequisite had already failed for good
                    notAdded += 1
                    #expect(prerequisites.contains { failedByIndex[$0] != nil || contract.skipped.contains($0) }, "\(name) was not added, but no prerequisite failed")
                } else {
                    // Every acknowledged operation that can succeed completed
                    Issue.record("\(name) \(contract.stored.contains(index) ? "was stored but never completed (lost)" : "was never added")")
                }
            }
        }
        let batches = contract.batches.count
        // A batch whose `add` lines were journaled again was interrupted before its `ack`s.
        let batchAddLines = journal.lines.filter { $0.first == "add" && $0.contains { $0.hasPrefix("batch=") } }.count
        let interrupted = batchAddLines / AlbumGraph.roles.count - batches
        return "\(albums) albums (\(batches) batches): \(completed) nodes completed, \(refused) refused, \(failedWithPrerequisite) failed with their prerequisite, \(notAdded) not added after it, \(crashLooped) crash-looped; \(interrupted) batch adds interrupted and made again; \(contract.ranTwice.count) ran twice"
    }
}
