import Foundation
import Testing
@testable import PersistentOperations

/// An asynchronous retrying operation whose attempt succeeds once the test opens its gate (a
/// semaphore registered under the payload's name and journal), or after 30 s.
final class GatedUpload: RetryingOperation, PersistentOperation, @unchecked Sendable {
    static let persistenceIdentifier = "test.gated-upload"
    private static let gates = Locked<[String: DispatchSemaphore]>([:])
    let payload: UploadPayload

    init(payload: UploadPayload) {
        self.payload = payload
        super.init()
    }

    /// The gate of the operation named `name` in `journal`.
    static func gate(_ name: String, journal: String) -> DispatchSemaphore {
        gates.withLock { gates in
            if let gate = gates[journal + "/" + name] { return gate }
            let gate = DispatchSemaphore(value: 0)
            gates[journal + "/" + name] = gate
            return gate
        }
    }

    override var isAsynchronous: Bool { true }

    override func startBaseOperation(isRetry: Bool) {
        Journal.record(payload.journal, "\(payload.name)#\(numberOfAttempts) retry=\(isRetry)")
        let gate = Self.gate(payload.name, journal: payload.journal)
        Thread.detachNewThread { [self] in
            // (Let go by the test; the timeout only keeps a failed test from leaving the thread
            // behind, and is long: on a loaded machine, under the thread sanitizer, the test
            // has taken 48 s.)
            _ = gate.wait(timeout: .now() + 300)
            Journal.record(payload.journal, "\(payload.name) ended")
            baseOperationEnded()
        }
    }
}

@Suite("Persistent queue: graceful shutdown", .timeLimit(.minutes(1)))
struct ShutdownTests {
    @Test func aShutdownLetsTheAttemptsInFlightEndStopsTheRestAsUncountedRetriesStartsNothingAndCloses() async throws {
        // Given two slots: an attempt that ends when let go, one that never ends by itself, and
        // a third operation waiting for a slot
        let fixture = try QueueFixture(maxConcurrent: 2)
        fixture.queue.register(GatedUpload.self)
        let gated = try fixture.queue.addOperation(GatedUpload(payload: UploadPayload(name: "gated", journal: fixture.journal)), options: EnqueueOptions()).id
        let hanging = try fixture.queue.addOperation(fixture.upload("hanging", [.hang, .succeed]), options: EnqueueOptions()).id
        let waiting = try fixture.queue.addOperation(fixture.upload("waiting"), options: EnqueueOptions()).id
        #expect(try await eventually { fixture.lines.contains("gated#1 retry=false") && fixture.lines.contains("hanging#1 retry=false retries=0") })

        // When the queue shuts down with a 5 s grace period, and the gated attempt is let go as
        // soon as the shutdown has suspended the queue (from a thread of its own: the test's
        // task may wait seconds for a thread of a loaded machine's pool, the grace period not)
        let queue = fixture.queue
        let gate = GatedUpload.gate("gated", journal: fixture.journal)
        Thread.detachNewThread {
            let giveUp = Date().addingTimeInterval(30)
            while !queue.isSuspended, Date() < giveUp { usleep(1_000) }
            gate.signal()
        }
        // (On a thread of its own, as `shutDown(gracePeriod:)` runs it: a child task could wait
        // for a thread of a loaded machine's pool longer than the gate thread waits.)
        let finished = Locked<ShutdownReport?>(nil)
        Thread.detachNewThread {
            let report = queue.shutDownAndWait(gracePeriod: 5)
            finished.withLock { $0 = report }
        }
        #expect(try await eventually { queue.isSuspended })
        queue.isSuspended = false   // ignored while shutting down
        #expect(queue.isSuspended)
        #expect(try await eventually(seconds: 50) { finished.withLock { $0 } != nil })
        let report = try #require(finished.withLock { $0 })

        // Then the gated attempt ended by itself, the hanging one was stopped, nothing else
        // started, and the queue is closed
        #expect(report.endedInGracePeriod == [gated])
        #expect(report.stopped == [hanging])
        #expect(report.stillRunning.isEmpty)
        #expect(!report.wasAlreadyClosed)
        #expect(report.duration >= 5)
        #expect(!fixture.lines.contains { $0.hasPrefix("waiting#") })
        #expect {
            try fixture.queue.addOperation(fixture.upload("late"))
        } throws: { ($0 as? PersistenceError)?.code == .storeNotWritable }
        #expect(await fixture.queue.shutDown().wasAlreadyClosed)

        // And the store holds the two unfinished operations: the stopped one with no retry
        // spent, the waiting one never attempted
        let records = try fixture.pendingRecords()
        #expect(Set(records.map(\.id)) == [hanging.rawValue, waiting.rawValue])
        let stopped = try #require(records.first { $0.id == hanging.rawValue })
        #expect(stopped.numberOfRetries == 0 && stopped.numberOfAttempts == 1 && stopped.attemptsInFlight == 0)
        #expect(stopped.lastErrorDescription?.contains("stopped") == true)

        // When the next launch restores: the stopped one runs again as a retry, and both finish
        let next = try QueueFixture(maxConcurrent: 2, directory: fixture.directory, journal: fixture.journal)
        next.queue.register(GatedUpload.self)
        #expect(try next.queue.restore().restored.count == 2)
        await next.queue.allOperationsFinished()
        #expect(fixture.lines.contains("hanging#2 retry=true retries=0"))
        #expect(fixture.lines.contains("waiting#1 retry=false retries=0"))
        #expect(try next.pendingRecords().isEmpty)
    }

    @Test func aShutdownWithNothingRunningClosesWithoutWaitingForItsGracePeriod() async throws {
        let fixture = try QueueFixture(maxConcurrent: 2)
        let queue = fixture.queue
        // snippet: graceful-shutdown
        let report = await queue.shutDown(gracePeriod: 20)
        print("\(report.endedInGracePeriod.count) ended, \(report.stopped.count) stopped, \(report.stillRunning.count) still running")
        // end snippet
        #expect(report.duration < 15)
        #expect(report.endedInGracePeriod.isEmpty && report.stopped.isEmpty && report.stillRunning.isEmpty)
        #expect(throws: PersistenceError.self) { try fixture.queue.restore() }
    }

    @Test func anInfiniteGracePeriodWaitsForTheAttemptsInFlightToEnd() async throws {
        // Given an attempt in flight that ends half a second after the shutdown begins
        let fixture = try QueueFixture(maxConcurrent: 1)
        fixture.queue.register(GatedUpload.self)
        let gated = try fixture.queue.addOperation(GatedUpload(payload: UploadPayload(name: "gated", journal: fixture.journal)), options: EnqueueOptions()).id
        #expect(try await eventually { fixture.lines.contains("gated#1 retry=false") })
        let queue = fixture.queue
        let gate = GatedUpload.gate("gated", journal: fixture.journal)
        Thread.detachNewThread {
            let giveUp = Date().addingTimeInterval(30)
            while !queue.isSuspended, Date() < giveUp { usleep(1_000) }
            usleep(500_000)
            gate.signal()
        }
        // When the queue shuts down with no limit on the grace period
        let report = await queue.shutDown(gracePeriod: .infinity)
        // Then it waited for the attempt, which succeeded
        #expect(report.endedInGracePeriod == [gated])
        #expect(report.stopped.isEmpty && report.stillRunning.isEmpty)
        #expect(try fixture.pendingRecords().isEmpty)
    }

    @Test func aBoundedRunEndsWithTheShutdownWhichGivesItsAttemptsTheGracePeriodAndNoRunStartsAfter() async throws {
        // Given a bounded run whose attempt never ends by itself
        let fixture = try QueueFixture(maxConcurrent: 2, suspended: true)
        let hanging = try fixture.queue.addOperation(fixture.upload("hanging", [.hang]), options: EnqueueOptions()).id
        let run = fixture.queue.startBoundedRun(until: .distantFuture, stopGracePeriod: 5)
        #expect(try await eventually { fixture.lines.contains("hanging#1 retry=false retries=0") })

        // When the queue shuts down with a half-second grace period
        let report = await fixture.queue.shutDown(gracePeriod: 0.5)

        // Then the run ended as the queue closed (it did not stop the attempt itself), the
        // shutdown stopped it once its grace period was over, and no run starts any more
        #expect(await run.report.ending == .queueClosed)
        #expect(await run.report.stopped.isEmpty)
        #expect(report.stopped == [hanging])
        #expect(report.duration >= 0.5)
        #expect(await fixture.queue.run(until: .distantFuture).ending == .queueClosed)
    }

    @Test func aShutdownDuringARestoreWaitsForItAndLosesNothing() async throws {
        // Given a store of 3,000 pending operations left by an earlier launch
        let directory = try TemporaryDirectory()
        let clock = ManualRetryScheduler()
        let journal = UUID().uuidString
        try QueueFixture.earlierLaunch(directory, clock: clock, events: Locked([])) { queue in
            for batch in 0..<3 {
                try queue.addOperations((0..<1_000).map { PlainNote(payload: UploadPayload(name: "n\(batch)-\($0)", journal: journal)) })
            }
        }

        // When the next launch (suspended, as an app restores before it resumes) shuts down
        // while it restores
        let fixture = try QueueFixture(maxConcurrent: 2, suspended: true, directory: directory, journal: journal)
        async let restored = Task.detached { try fixture.queue.restore().restored.count }.result
        async let report = fixture.queue.shutDown(gracePeriod: 1)

        // Then the restore either completed or was refused, the shutdown closed the queue...
        switch await restored {
        case .success(let count): #expect(count == 3_000)
        case .failure(let error): #expect((error as? PersistenceError)?.code == .storeNotWritable)
        }
        #expect(await report.wasAlreadyClosed == false)
        #expect(throws: PersistenceError.self) { try fixture.queue.addOperation(fixture.note("late")) }

        // ...and the launch after that finds every operation still pending
        let next = try QueueFixture(maxConcurrent: 2, suspended: true, directory: directory, journal: journal)
        #expect(try next.queue.restore().restored.count == 3_000)
        next.queue.close()
    }
}
