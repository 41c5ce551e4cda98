import Foundation
import Testing
@testable import PersistentOperations

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

@Suite("Persistent queue: periodic series across restarts (child processes)", .timeLimit(.minutes(2)))
struct PeriodicAcrossRestartTests {
    /// The single pending record of the store, read by an independent read-only store.
    private func theSeries(_ directory: TemporaryDirectory) throws -> OperationRecord {
        let records = try RecordStore(directory: directory.store, access: .readOnly).loadPending().records
        try #require(records.count == 1, "expected one series, found \(records.count) records")
        return records[0]
    }

    private func lines(_ path: String) -> [String] {
        ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
    }

    @Test func aSeriesKilledBetweenPeriodsKeepsItsNextDateAcrossFiveLaunches() async throws {
        // Given an app whose hourly series ran its first period, then was SIGKILLed
        let directory = try TemporaryDirectory()
        let effects = directory.url.appendingPathComponent("effects.txt").path
        let arguments = ["periodic", "--store", directory.store.path, "--effects", effects, "--interval", "3600", "--attempt-ms", "10"]
        let first = try ChildApp.launch(arguments)
        #expect(try await eventually(seconds: 30) {
            (try? RecordStore(directory: directory.store, access: .readOnly).loadPending().records.first?.completedPeriods) == 1
        })
        kill(first.processIdentifier, SIGKILL)
        await onDedicatedThread { first.waitUntilExit() }

        // When it is launched five more times (each restores, re-adds under the key, and is killed)
        for _ in 0..<5 {
            let outputPath = directory.url.appendingPathComponent("output-\(UUID().uuidString).txt").path
            _ = FileManager.default.createFile(atPath: outputPath, contents: nil)
            let app = try ChildApp.launch(arguments, output: try FileHandle(forWritingTo: URL(fileURLWithPath: outputPath)))
            #expect(try await eventually(seconds: 30) { lines(outputPath).contains("ready") })
            try await Task.sleep(for: .milliseconds(200))
            kill(app.processIdentifier, SIGKILL)
            await onDedicatedThread { app.waitUntilExit() }
        }

        // Then the period ran once in all (the SwiftQueue bug: once per launch), and the
        // series still waits for start + 1 hour
        #expect(lines(effects).filter { $0.hasPrefix("start ") }.count == 1)
        let series = try theSeries(directory)
        #expect(series.uniqueKey == "tick" && series.completedPeriods == 1 && series.numberOfAttempts == 0)
        #expect(series.periodTarget == series.enqueuedAt.addingTimeInterval(3600))
        #expect(series.notBefore == series.periodTarget)
    }

    @Test func aSeriesKilledAtRandomMomentsLosesNoPeriodAndKeepsItsGrid() async throws {
        // Given an app running a series every 0.5 s (attempts of 150 ms), SIGKILLed six times at
        // random moments — mid-attempt, mid-write, between periods — then run until 8 periods ended
        let directory = try TemporaryDirectory()
        let effects = directory.url.appendingPathComponent("effects.txt").path
        let arguments = ["periodic", "--store", directory.store.path, "--effects", effects, "--interval", "0.5",
                         "--attempt-ms", "150", "--until-periods", "8"]
        let kills = 6
        try await onDedicatedThread {
            try ChildApp.killRepeatedlyThenFinish(arguments, kills: kills, pause: 20_000...700_000, seed: 16, timeout: 90, afterFirstAttemptIn: effects)
        }

        // Then one series remains, 8 periods ended, every period's target on the grid of its
        // first one (no drift, whatever the kills), and only attempts cut off by a kill ran
        // again as retries
        let series = try theSeries(directory)
        #expect(series.uniqueKey == "tick")
        #expect(series.completedPeriods >= 8)
        let target = try #require(series.periodTarget)
        let intervals = target.timeIntervalSince(series.enqueuedAt) / 0.5
        #expect(abs(intervals - intervals.rounded()) < 1e-6, "the target is \(intervals) intervals after the first")
        #expect(intervals >= 8)
        let log = lines(effects)
        #expect(log.filter { $0 == "done 0" }.count >= 8)   // at least once per period
        let resumed = log.filter { $0.hasPrefix("start 0") && $0.contains("retry=true") }.count
        #expect(resumed <= kills)
    }
}
