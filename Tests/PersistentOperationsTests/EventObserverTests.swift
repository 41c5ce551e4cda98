import Foundation
import Testing
@testable import PersistentOperations

/// An operation whose attempts take `milliseconds` each, on a thread of their own, and follow
/// `steps` (the last one repeats).
private final class TimedJob: RetryingOperation, PersistentOperation, @unchecked Sendable {
    struct Payload: Codable, Sendable {
        var milliseconds: Int
        var steps: [UploadStep]
    }

    static let persistenceIdentifier = "test.timed-job"
    let payload: Payload

    init(payload: Payload) {
        self.payload = payload
        super.init()
    }

    override var isAsynchronous: Bool { true }

    override func startBaseOperation(isRetry: Bool) {
        let step = payload.steps[min(numberOfAttempts - 1, payload.steps.count - 1)]
        let milliseconds = payload.milliseconds
        Thread.detachNewThread { [self] in
            Thread.sleep(forTimeInterval: Double(milliseconds) / 1000)
            switch step {
            case .succeed: baseOperationEnded()
            case .retry: baseOperationEnded(needsRetryIn: 0, countsTowardRetryLimit: true)
            case .retryUncounted: baseOperationEnded(needsRetryIn: 0, countsTowardRetryLimit: false)
            case .fail: baseOperationEnded(failingWith: UploadFailed())
            case .hang: break
            }
        }
    }

    override func cancelBaseOperation() {
        baseOperationEnded(failingWith: CancellationError())
    }
}

private typealias Observed = (event: PersistentOperationEvent, subject: PersistentOperationEvent.Subject?)

@Suite("Persistent queue: event observers, and the attempt and duration of events", .timeLimit(.minutes(1)))
struct EventObserverTests {
    private func makeQueue(_ directory: TemporaryDirectory, configuration: PersistentOperationQueue.Configuration = .init()) throws -> PersistentOperationQueue {
        let queue = try PersistentOperationQueue(directory: directory.store, operationQueue: OperationQueue(), configuration: configuration)
        queue.register(TimedJob.self)
        return queue
    }

    @Test func anObserverSeesEachAttemptsNumberAndHowLongItRan() async throws {
        let directory = try TemporaryDirectory()
        let queue = try makeQueue(directory)
        let seen = Locked<[Observed]>([])
        queue.addEventObserver { event, subject in seen.withLock { $0.append((event, subject)) } }
        // Given an operation whose first attempt retries and whose second succeeds, each
        // taking 60 ms
        let before = Date()
        let job = TimedJob(payload: .init(milliseconds: 60, steps: [.retry, .succeed]))
        let id = try queue.addOperation(job, options: EnqueueOptions(tags: ["photos"])).id
        #expect(try await eventually { seen.withLock { $0.contains { if case .succeeded = $0.event { true } else { false } } } })
        queue.close()
        let events = seen.withLock { $0 }.filter { $0.event.operationID == id }

        // Then every event came with its subject: the type, the tags and when it was stored
        #expect(events.allSatisfy { $0.subject?.typeIdentifier == "test.timed-job" && $0.subject?.tags == ["photos"] })
        let enqueuedAt = try #require(events.first?.subject?.enqueuedAt)
        #expect(abs(enqueuedAt.timeIntervalSince(before)) < 5)
        // And the starts say which attempt starts, with no duration
        let starts = events.filter { if case .started = $0.event { true } else { false } }
        #expect(starts.map { $0.subject?.attempt } == [1, 2])
        #expect(starts.allSatisfy { $0.subject?.attemptDuration == nil })
        // And the retry and the success say which attempt ended and how long it ran
        let retry = try #require(events.first { if case .retryScheduled = $0.event { true } else { false } })
        #expect(retry.subject?.attempt == 1)
        #expect(try #require(retry.subject?.attemptDuration) >= 0.06)
        let success = try #require(events.first { if case .succeeded = $0.event { true } else { false } })
        #expect(success.subject?.attempt == 2)
        #expect(try #require(success.subject?.attemptDuration) >= 0.06)
        #expect(try #require(success.subject?.attemptDuration) < 30)
    }

    @Test func aFailureForGoodCarriesItsLastAttemptAndACancelWhileWaitingCarriesNoDuration() async throws {
        let directory = try TemporaryDirectory()
        let clock = ManualRetryScheduler()
        let queue = try makeQueue(directory, configuration: .init(scheduler: clock))
        let seen = Locked<[Observed]>([])
        queue.addEventObserver { event, subject in seen.withLock { $0.append((event, subject)) } }
        // Given one operation that fails for good at its first attempt, and one that waits for
        // its not-before date
        let failing = try queue.addOperation(TimedJob(payload: .init(milliseconds: 20, steps: [.fail])), options: EnqueueOptions()).id
        let waiting = try queue.addOperation(
            TimedJob(payload: .init(milliseconds: 20, steps: [.succeed])), options: EnqueueOptions(notBefore: clock.now.addingTimeInterval(3600))
        ).id
        #expect(try await eventually { seen.withLock { $0.contains { if case .failed = $0.event { true } else { false } } } })
        // When the waiting one is cancelled
        #expect(queue.cancelOperation(withID: waiting))
        #expect(try await eventually { seen.withLock { $0.contains { if case .cancelled = $0.event { true } else { false } } } })
        queue.close()
        let events = seen.withLock { $0 }

        // Then the failure says attempt 1 and how long it ran
        let failure = try #require(events.first { $0.event.operationID == failing && { if case .failed = $0 { true } else { false } }($0.event) })
        #expect(failure.subject?.attempt == 1)
        #expect(try #require(failure.subject?.attemptDuration) >= 0.02)
        // And the cancel of the one that never ran has no attempt and no duration
        let cancel = try #require(events.first { $0.event.operationID == waiting && { if case .cancelled = $0 { true } else { false } }($0.event) })
        #expect(cancel.subject?.attempt == 0)
        #expect(cancel.subject?.attemptDuration == nil)
    }

    @Test func observersAreIndependentOfTheHandlersAndOfEachOtherAndStopWhenCancelled() async throws {
        let directory = try TemporaryDirectory()
        let queue = try makeQueue(directory)
        let first = Locked<[PersistentOperationEvent]>([])
        let second = Locked<[PersistentOperationEvent]>([])
        let handled = Locked<[PersistentOperationEvent]>([])
        // Given the app's handler with subject, and two observers
        queue.eventHandlerWithSubject = { event, _ in handled.withLock { $0.append(event) } }
        let firstObservation = queue.addEventObserver { event, _ in first.withLock { $0.append(event) } }
        queue.addEventObserver { event, _ in second.withLock { $0.append(event) } }
        let one = try queue.addOperation(TimedJob(payload: .init(milliseconds: 1, steps: [.succeed])), options: EnqueueOptions()).id
        #expect(try await eventually { second.withLock { $0.contains(.succeeded(one)) } })
        // When the first observation is cancelled and another operation runs
        firstObservation.cancel()
        firstObservation.cancel()   // (a second cancel does nothing)
        let countAtCancel = first.withLock { $0.count }
        let two = try queue.addOperation(TimedJob(payload: .init(milliseconds: 1, steps: [.succeed])), options: EnqueueOptions()).id
        #expect(try await eventually { second.withLock { $0.contains(.succeeded(two)) } })
        queue.close()

        // Then the handler and the second observer saw every event, in the same order
        #expect(handled.withLock { $0 } == second.withLock { $0 })
        #expect(second.withLock { $0 }.contains(.enqueued(two, typeIdentifier: "test.timed-job")))
        // And the first saw none of the second operation's
        #expect(first.withLock { $0.count } == countAtCancel)
        #expect(!first.withLock { $0 }.contains { $0.operationID == two })
    }

    @Test func theOperationsLogMessagesCarryStructuredFields() async throws {
        let directory = try TemporaryDirectory()
        let messages = Locked<[RetryLogHandler.Message]>([])
        var configuration = PersistentOperationQueue.Configuration()
        configuration.operationLogHandler = RetryLogHandler(minimumLevel: .debug) { message in messages.withLock { $0.append(message) } }
        configuration.logHandler = configuration.operationLogHandler
        let queue = try makeQueue(directory, configuration: configuration)
        // Given an operation that retries once, then fails for good
        let job = TimedJob(payload: .init(milliseconds: 10, steps: [.retryUncounted, .fail]))
        let id = try queue.addOperation(job, options: EnqueueOptions()).id
        _ = await job.finalOutcome
        queue.close()
        let logged = messages.withLock { $0 }.filter { $0.metadata["operation_id"] == id.rawValue }

        // Then each of its messages names the stored operation and its type
        #expect(!logged.isEmpty)
        #expect(logged.allSatisfy { $0.metadata["type"] == "test.timed-job" })
        // And the start of attempt 2 says so
        #expect(logged.contains { $0.text.hasPrefix("starting attempt 2") && $0.metadata["attempt"] == "2" && $0.metadata["retries"] == "0" })
        // And the retry says its outcome, that it is not counted, its delay and how long the attempt ran
        let retry = try #require(logged.first { $0.metadata["outcome"] == "retry" })
        #expect(retry.metadata["attempt"] == "1")
        #expect(retry.metadata["counted"] == "false")
        #expect(retry.metadata["delay"] == "0.0")
        #expect(try #require(retry.metadata["duration"].flatMap(Double.init)) >= 0.01)
        // And the finish says it failed, after how many attempts, and with what error
        let finish = try #require(logged.first { $0.text.hasPrefix("finished") })
        #expect(finish.metadata["outcome"] == "failed")
        #expect(finish.metadata["attempts"] == "2")
        #expect(finish.metadata["error"] == "the server refused the upload")
        #expect(finish.metadata["duration"] != nil)
    }

    @Test func theQueuesRestoreMessageCarriesItsCounts() async throws {
        let directory = try TemporaryDirectory()
        let messages = Locked<[RetryLogHandler.Message]>([])
        var queue = try makeQueue(directory, configuration: .init(scheduler: ManualRetryScheduler()))
        for _ in 0..<2 {
            _ = try queue.addOperation(TimedJob(payload: .init(milliseconds: 1, steps: [.succeed])), options: EnqueueOptions(notBefore: Date().addingTimeInterval(3600)))
        }
        queue.close()
        var configuration = PersistentOperationQueue.Configuration(scheduler: ManualRetryScheduler())
        configuration.logHandler = RetryLogHandler(minimumLevel: .info) { message in messages.withLock { $0.append(message) } }
        queue = try makeQueue(directory, configuration: configuration)
        try queue.restore()
        queue.close()
        let restore = try #require(messages.withLock { $0 }.first { $0.text.hasPrefix("restored") })
        #expect(restore.metadata == ["restored": "2", "quarantined": "0", "unknown_types": "0", "moved_to_failed": "0"])
    }
}

@Suite("Persistent queue: tags of each member of a batch", .timeLimit(.minutes(1)))
struct BatchMemberTagTests {
    @Test func eachMemberGetsTheBatchsTagsAndItsOwnAndTheyAreStored() async throws {
        let fixture = try QueueFixture(maxConcurrent: 1, suspended: true)
        let first = fixture.upload("first")
        let second = fixture.upload("second")
        second.addDependency(first)
        // Given a batch tagged "job:1" whose members say their own step
        let ids = try fixture.queue.addOperations([first, second], options: EnqueueOptions(tags: ["job:1"])) { member in
            member === first ? ["step:1"] : ["step:2"]
        }
        // Then each member carries both, in memory and on disk
        #expect(fixture.queue.operation(withID: ids[0])?.tags == ["job:1", "step:1"])
        #expect(fixture.queue.operation(withID: ids[1])?.tags == ["job:1", "step:2"])
        #expect(fixture.queue.numberOfOperations(taggedWith: "job:1") == 2)
        #expect(fixture.queue.numberOfOperations(taggedWith: "step:2") == 1)
        let stored = try fixture.pendingRecords()
        #expect(Set(stored.map { Set($0.tags) }) == [["job:1", "step:1"], ["job:1", "step:2"]])
        // And cancelling by a member's own tag cancels only that member
        #expect(fixture.queue.cancelOperations(taggedWith: "step:2") == 1)
        #expect(try await eventually { fixture.queue.numberOfOperations(taggedWith: "job:1") == 1 })
        fixture.queue.close()
    }
}
