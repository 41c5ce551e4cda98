import Foundation
import Testing
@testable import PersistentOperations
import RetryingOperation

/// An operation that reports `steps` of `total` units, then, when it has a gate, waits for the
/// gate to open before it ends: succeeded, or failed for good when `fails`.
final class ReportingWork: RetryingOperation, PersistentOperation, @unchecked Sendable {
    struct Payload: Codable, Sendable {
        var steps: Int = 0
        var total: Int = 4
        var gate: String?
        var fails = false
    }

    /// Gates by name: an operation with a gate ends once its semaphore is signalled.
    static let gates = Locked<[String: DispatchSemaphore]>([:])

    static let persistenceIdentifier = "test.reporting-work"
    let payload: Payload

    init(payload: Payload) {
        self.payload = payload
        super.init()
        retryPolicy = .constant(0, retryLimit: .maximum(0))
    }

    override var isAsynchronous: Bool { true }

    override func startBaseOperation(isRetry: Bool) {
        for step in stride(from: 1, through: payload.steps, by: 1) {
            reportProgress(completed: Int64(step), of: Int64(payload.total))
        }
        let gate = payload.gate.flatMap { name in Self.gates.withLock { $0[name] } }
        // (A thread of its own: a gate held shut must not hold a thread of the pools the
        // other tests' tasks and attempts need.)
        Thread.detachNewThread {
            gate?.wait()
            if self.payload.fails {
                self.baseOperationEnded(withRetriableError: CocoaError(.fileWriteUnknown))
            } else {
                self.baseOperationEnded()
            }
        }
    }

    /// A new gate, closed.
    static func gate() -> (name: String, semaphore: DispatchSemaphore) {
        let name = UUID().uuidString
        let semaphore = DispatchSemaphore(value: 0)
        gates.withLock { $0[name] = semaphore }
        return (name, semaphore)
    }
}

/// An upload that resumes at the units its progress holds: each attempt logs where it starts
/// and reports 3 units more of 10; the first fails (a retry an hour later), the next succeeds.
final class ResumingUpload: RetryingOperation, PersistentOperation, @unchecked Sendable {
    struct Payload: Codable, Sendable { var log: String }
    static let persistenceIdentifier = "test.resuming-upload"
    static let logs = Locked<[String: [String]]>([:])
    let payload: Payload

    init(payload: Payload) {
        self.payload = payload
        super.init()
        retryPolicy = .constant(3_600, retryLimit: .maximum(3))
    }

    override var isAsynchronous: Bool { true }

    override func startBaseOperation(isRetry: Bool) {
        let from = progress.completedUnitCount
        Self.logs.withLock { $0[payload.log, default: []].append("from \(from) of \(progress.totalUnitCount), isRetry=\(isRetry)") }
        reportProgress(completed: from + 3, of: 10)
        if numberOfAttempts == 1 {
            baseOperationEnded(withRetriableError: CocoaError(.fileWriteUnknown))
        } else {
            baseOperationEnded()
        }
    }
}

@Suite("Persistent queue: progress of the queue, a tag, a lane", .timeLimit(.minutes(1)))
struct QueueProgressTests {
    /// A suspended queue updating progress every `interval`, and the progress events it emits.
    static func queue(
        directory: TemporaryDirectory, interval: TimeInterval = 0.01, maxConcurrent: Int = 4
    ) throws -> (PersistentOperationQueue, Locked<[PersistentOperationEvent]>) {
        let operationQueue = OperationQueue()
        operationQueue.maxConcurrentOperationCount = maxConcurrent
        operationQueue.isSuspended = true
        var configuration = PersistentOperationQueue.Configuration()
        configuration.progressInterval = interval
        let queue = try PersistentOperationQueue(directory: directory.store, operationQueue: operationQueue, configuration: configuration)
        queue.register(ReportingWork.self)
        let events = Locked<[PersistentOperationEvent]>([])
        queue.eventHandler = { event in
            if case .progress = event { events.withLock { $0.append(event) } }
        }
        return (queue, events)
    }

    static func units(_ progress: Progress) -> (completed: Int64, total: Int64) {
        (progress.completedUnitCount, progress.totalUnitCount)
    }

    @Test func aTagsProgressCountsItsPendingOperationsAndThoseAddedAfterAndEachEndCompletesOne() async throws {
        // Given a suspended queue holding 3 operations tagged "photos" and one that is not
        let directory = try TemporaryDirectory()
        let (queue, events) = try Self.queue(directory: directory)
        defer { queue.close() }
        let photos = EnqueueOptions(tags: ["photos"])
        for _ in 0..<3 { try queue.addOperation(ReportingWork(payload: .init()), options: photos) }
        try queue.addOperation(ReportingWork(payload: .init()))

        // When the progress of "photos" is asked for, then one more photo is added, one of
        // them fails for good and one is cancelled
        let progress = queue.progress(for: .tag("photos"))
        #expect(Self.units(progress) == (0, 3_000))
        #expect(queue.progress(for: .tag("photos")) === progress)
        try queue.addOperation(ReportingWork(payload: .init(fails: true)), options: photos)
        let cancelled = try queue.addOperation(ReportingWork(payload: .init()), options: photos)
        #expect(try await eventually { Self.units(progress) == (0, 5_000) })
        #expect(queue.cancelOperation(withID: cancelled.id))
        #expect(try await eventually { Self.units(progress) == (1_000, 5_000) })

        // Then, as the rest run, it counts every photo once they have all ended, failed included
        queue.isSuspended = false
        await queue.allOperationsFinished()
        #expect(try await eventually { Self.units(progress) == (5_000, 5_000) })
        #expect(progress.fractionCompleted == 1)
        // And its events say the same, the last one whole
        #expect(try await eventually {
            events.withLock { $0.last } == .progress(.tag("photos"), fractionCompleted: 1, operations: 5)
        })
        #expect(events.withLock { $0.allSatisfy { if case .progress(.tag("photos"), _, _) = $0 { true } else { false } } })
    }

    @Test func aRunningOperationsReportedFractionMovesItsGroupsProgressBeforeItEnds() async throws {
        // Given the progress of a lane and of the whole queue, and in the lane an operation that
        // reports 3 of 4 units and then waits
        let directory = try TemporaryDirectory()
        let (queue, _) = try Self.queue(directory: directory)
        defer { queue.close() }
        let lane = queue.progress(for: .lane("account-1"))
        let all = queue.progress(for: .all)
        let (name, gate) = ReportingWork.gate()
        try queue.addOperation(ReportingWork(payload: .init(steps: 3, total: 4, gate: name)), options: EnqueueOptions(lane: "account-1"))
        try queue.addOperation(ReportingWork(payload: .init()))

        // When it runs
        queue.isSuspended = false

        // Then the lane's progress is at three quarters of its one operation, and the queue's
        // counts it with the other, which ended
        #expect(try await eventually { Self.units(lane) == (750, 1_000) })
        #expect(try await eventually { Self.units(all) == (1_750, 2_000) })

        // And once it ends, both are complete
        gate.signal()
        await queue.allOperationsFinished()
        #expect(try await eventually { Self.units(lane) == (1_000, 1_000) && Self.units(all) == (2_000, 2_000) })
    }

    @Test func manyReportsWithinAnIntervalMakeOneUpdate() async throws {
        // Given a queue that updates progress at most every 0.3 s, its progress asked for
        let directory = try TemporaryDirectory()
        let (queue, events) = try Self.queue(directory: directory, interval: 0.3)
        defer { queue.close() }
        _ = queue.progress(for: .all)

        // When an operation reports 5,000 times and then waits
        let (name, gate) = ReportingWork.gate()
        let started = Date()
        try queue.addOperation(ReportingWork(payload: .init(steps: 5_000, total: 5_000, gate: name)))
        queue.isSuspended = false
        #expect(try await eventually { events.withLock { $0.last } == .progress(.all, fractionCompleted: 1, operations: 1) && true })
        try await Task.sleep(for: .milliseconds(700))

        // Then the progress moved at most once an interval since the add (and at least once)
        let updates = events.withLock { $0.count }
        let intervals = Date().timeIntervalSince(started) / 0.3
        #expect(updates >= 1 && Double(updates) <= intervals.rounded(.up) + 1, "\(updates) updates in \(intervals) intervals")
        gate.signal()
        await queue.allOperationsFinished()
    }

    @Test func aQueueWhoseProgressNobodyAskedForEmitsNone() async throws {
        // Given a queue whose progress nobody asked for
        let directory = try TemporaryDirectory()
        let (queue, events) = try Self.queue(directory: directory)
        defer { queue.close() }

        // When operations report and end
        for _ in 0..<3 { try queue.addOperation(ReportingWork(payload: .init(steps: 4))) }
        queue.isSuspended = false
        await queue.allOperationsFinished()
        try await Task.sleep(for: .milliseconds(50))

        // Then it kept no group and emitted no progress event
        #expect(events.withLock { $0.isEmpty })
        #expect(queue.state.withLock { $0.progressGroups.isEmpty })
    }

    @Test func aRestoredBacklogJoinsTheProgressAskedForBeforeTheRestore() async throws {
        // Given a store holding 5 operations, 2 of them tagged "photos"
        let directory = try TemporaryDirectory()
        do {
            let (first, _) = try Self.queue(directory: directory)
            for index in 0..<5 {
                try first.addOperation(ReportingWork(payload: .init()), options: EnqueueOptions(tags: index < 2 ? ["photos"] : []))
            }
            first.close()
        }

        // When a new queue's progress is asked for before it restores them
        let (queue, _) = try Self.queue(directory: directory)
        defer { queue.close() }
        let all = queue.progress(for: .all)
        let photos = queue.progress(for: .tag("photos"))
        #expect(Self.units(all) == (0, 0))
        #expect(try queue.restore().restored.count == 5)

        // Then they count what was restored, and complete as it runs
        #expect(try await eventually { Self.units(all) == (0, 5_000) && Self.units(photos) == (0, 2_000) })
        queue.isSuspended = false
        await queue.allOperationsFinished()
        #expect(try await eventually { Self.units(all) == (5_000, 5_000) && Self.units(photos) == (2_000, 2_000) })
    }

    @Test func theReadmesExampleShowsAnUploadsReportedFractionAndTheEnd() async throws {
        // Given a suspended queue (the README's `queue`) and a status line
        let directory = try TemporaryDirectory()
        let (queue, _) = try Self.queue(directory: directory)
        defer { queue.close() }
        let statusLines = Locked<[String]>([])
        let showStatus: @Sendable (String) -> Void = { line in statusLines.withLock { $0.append(line) } }

        // snippet: queue-progress
        let photos = queue.progress(for: .tag("photos"))   // the same Progress at every call
        // On Apple platforms, show it (`ProgressView(photos)`); on every platform, its events:
        queue.eventHandler = { event in
            if case .progress(.tag("photos"), let fraction, let operations) = event {
                showStatus("\(operations) photos: \(Int(fraction * 100)) %")
            }
        }
        // end snippet

        // When two photos are added, one of which reports half its bytes and waits
        let (name, gate) = ReportingWork.gate()
        try queue.addOperation(ReportingWork(payload: .init(steps: 2, total: 4, gate: name)), options: EnqueueOptions(tags: ["photos"]))
        try queue.addOperation(ReportingWork(payload: .init()), options: EnqueueOptions(tags: ["photos"]))
        queue.isSuspended = false

        // Then the status shows the two at 75 %, then at 100 %
        #expect(try await eventually { statusLines.withLock { $0.last } == "2 photos: 75 %" })
        gate.signal()
        await queue.allOperationsFinished()
        #expect(try await eventually { statusLines.withLock { $0.last } == "2 photos: 100 %" })
        #expect(photos.fractionCompleted == 1)
    }

    @Test func anOperationsReportedProgressIsKeptWithItsRecordAndItsRestoredOperationResumesThere() async throws {
        // Given an upload whose first attempt reported 3 of 10 units and ended in a retry an
        // hour away, in a queue that then closed (the app was killed)
        let log = UUID().uuidString
        let first = try QueueFixture(maxConcurrent: 1)
        first.queue.register(ResumingUpload.self)
        try first.queue.addOperation(ResumingUpload(payload: .init(log: log)))
        #expect(try await eventually { try first.pendingRecords().first?.numberOfRetries == 1 })
        #expect(try first.pendingRecords().first?.progressUnits == OperationRecord.ProgressUnits(completed: 3, total: 10))
        first.queue.close()

        // When a new launch restores it and the retry comes due
        let second = try QueueFixture(maxConcurrent: 1, directory: first.directory, journal: first.journal)
        second.queue.register(ResumingUpload.self)
        try second.queue.restore()
        second.clock.advance(by: 3_600)
        await second.queue.allOperationsFinished()

        // Then its rebuilt operation's attempt started from the 3 units the first reported
        #expect(ResumingUpload.logs.withLock { $0[log] } == ["from 0 of -1, isRetry=false", "from 3 of 10, isRetry=true"])
        #expect(try second.pendingRecords().isEmpty)
    }

    @Test func theProgressKeysReadBackInEveryFormatVersionAndARecordWithoutThemHasNone() throws {
        var record = OperationRecord(typeIdentifier: "test.resuming-upload", payload: Data([1]), enqueueSequence: 7)
        #expect(try RecordFormat.decode(try RecordFormat.encode(record)).progressUnits == nil)
        record.progressUnits = OperationRecord.ProgressUnits(completed: 1 << 40, total: -1)
        for version in [record.requiredFormatVersion, 5, 6] {
            let decoded = try RecordFormat.decode(try RecordFormat.encode(record, formatVersion: version))
            #expect(decoded.progressUnits == record.progressUnits && decoded == record)
        }
        // (Through a `Codable` coder too, as `store-inspector export` writes records.)
        let json = try JSONEncoder().encode(record)
        #expect(try JSONDecoder().decode(OperationRecord.self, from: json).progressUnits == record.progressUnits)
        // A record holding only one of the two keys (written by hand) has no progress
        record.formatVersion = 5
        guard case .dictionary(var entries) = record.propertyListValue else { Issue.record("not a dictionary"); return }
        #expect(entries["progressCompleted"] == .integer(1 << 40) && entries["progressTotal"] == .integer(-1))
        entries["progressTotal"] = nil
        let oneKey = try OperationRecord(propertyListValue: .dictionary(entries), headerVersion: 5)
        #expect(oneKey.progressUnits == nil)
    }

    @Test func aGroupWhoseLastOperationEndsIsWholeByTheTimeAllOperationsFinishedReturns() async throws {
        // Given a queue that updates progress at most every 10 s, and its progress of a tag
        let directory = try TemporaryDirectory()
        let (queue, events) = try Self.queue(directory: directory, interval: 10)
        defer { queue.close() }
        let photos = queue.progress(for: .tag("photos"))
        for _ in 0..<2 { try queue.addOperation(ReportingWork(payload: .init(steps: 2)), options: EnqueueOptions(tags: ["photos"])) }

        // When they run and the queue is empty
        queue.isSuspended = false
        await queue.allOperationsFinished()

        // Then the progress is whole already, not at the next update, and its event was emitted
        #expect(Self.units(photos) == (2_000, 2_000))
        #expect(try await eventually { events.withLock { $0.last } == .progress(.tag("photos"), fractionCompleted: 1, operations: 2) })
    }
}
