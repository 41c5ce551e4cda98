import Foundation
import Testing
@testable import PersistentOperations

/// The crash soak, bounded for CI: `crash-demo soak` kills the child app at aimed-at moments
/// for 60 cycles. The full run (500 cycles) is a documented command:
///
///     swift run crash-demo soak --cycles 500 --count 6 --seed 7
@Suite("Crash soak", .timeLimit(.minutes(5)), .serialized)
struct CrashSoakTests {
    static let cycles = 60
    static let uploadsPerCycle = 6

    @Test func sixtyCyclesOfAimedKillsLoseNothingAndRepeatOnlyWhatWasInFlight() async throws {
        // Given the soak driver killing the app (or, every fourth cycle, sending it SIGTERM)
        // during restore, adds, attempts, retry waits and removals, with uploads that succeed, retry, fail for good and crash the app, and
        // one album (an operation graph, added as a batch or node by node) more per cycle
        let directory = try TemporaryDirectory()
        let arguments = [
            "soak", "--cycles", "\(Self.cycles)", "--count", "\(Self.uploadsPerCycle)", "--albums", "1", "--seed", "20251121",
            "--directory", directory.url.path,
        ]
        let (status, output) = try await onDedicatedThread { () -> (Int32, String) in
            let pipe = Pipe()
            let soak = try ChildApp.launch(arguments, output: pipe.fileHandleForWriting)
            try? pipe.fileHandleForWriting.close()
            let output = pipe.fileHandleForReading.readDataToEndOfFile()
            try ChildApp.waitForExit(soak, timeout: 240)
            return (soak.terminationStatus, String(decoding: output, as: UTF8.self))
        }
        print(output)
        // Then the driver's own checks pass
        #expect(status == 0, "\(output)")
        #expect(output.contains("crash soak: PASS"))
        #expect(output.contains("lost: 0,"))
        // And every fourth cycle's SIGTERM (15 of the 60, less those whose app a poison
        // upload ended first) led to a shutdown within the grace period plus 1 s and an exit
        // with status 0 (the driver's checks), spending no retry
        let terminated = output.split(separator: "\n").first { $0.hasPrefix("  cycles:") }
            .flatMap { line in line.split(separator: ",").first { $0.hasSuffix("sent SIGTERM") } }
            .flatMap { Int($0.split(separator: " ").first ?? "") }
        #expect(try #require(terminated) >= 10, "\(output)")
        #expect(output.contains("retries counted without a counted retry asked for: 0"))
        // And this suite's verifier agrees on the journal and the store it left
        let journal = try EffectsJournal(path: directory.url.appendingPathComponent("effects.txt").path)
        let failed = try RecordStore(directory: directory.store, access: .readOnly).loadFailed().records
        var failedIndices: [Int] = []
        var crashLooped = Set<Int>()
        for record in failed {
            let index = try RecordFormat.decodePayload(DemoUploadJob.self, from: record.payload).index
            failedIndices.append(index)
            if record.failureReason?.contains("while its attempt ran alone") == true { crashLooped.insert(index) }
        }
        let count = Self.cycles * Self.uploadsPerCycle
        let summary = try ChildProcessTests.verify(journal, count: count, failedIndices: failedIndices, crashLooped: crashLooped)
        print("crash soak verified by the test suite: \(journal.launches) launches, \(summary), \(crashLooped.count) crash-looped")
        // And its albums kept the graph contract
        let graphs = try OperationGraphCrashTests.verifyGraphs(journal, failed: failed, albums: Self.cycles, allowsCrashLoops: true)
        print("crash soak's graphs verified by the test suite: \(graphs)")
        #expect(output.contains("dependents started before their prerequisites succeeded: 0; batches partly restored: 0"))
        // And the kills were spread over every phase (the SIGTERMs' line need not be)
        let kills = try #require(output.split(separator: "\n").first { $0.hasPrefix("  kills by phase:") })
        for phase in ["restore", "adds", "attempt", "retry-wait", "removal"] {
            #expect(!kills.contains("\(phase) 0,") && !kills.contains("\(phase) 0 "), "no kill during \(phase): \(kills)")
        }
        #expect(try directory.names(in: "pending").isEmpty)
        let quarantined = try directory.names(in: "quarantine")
        #expect(quarantined.isEmpty, "\(quarantined.sorted().prefix(6))")
    }
}
