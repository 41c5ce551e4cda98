import Foundation
import Testing
@testable import PersistentOperations

/// Its first attempt hears "429, Retry-After: 60": it pauses the operations tagged "api" and
/// retries at once, without counting; the next attempt succeeds.
private final class ThrottledUpload: RetryingOperation, PersistentOperation, @unchecked Sendable {
    static let persistenceIdentifier = "test.throttled-upload"
    let payload: String
    weak var queue: PersistentOperationQueue?

    init(payload: String) {
        self.payload = payload
        super.init()
    }

    override var isAsynchronous: Bool { true }

    override func startBaseOperation(isRetry: Bool) {
        let attempt = numberOfAttempts
        Journal.record(payload, "throttled#\(attempt) retry=\(isRetry) retries=\(numberOfRetries ?? -1)")
        Thread.detachNewThread { [self] in
            if attempt == 1 {
                queue?.pause(for: 60, taggedWith: "api")
                baseOperationEnded(needsRetryIn: 0, countsTowardRetryLimit: false)
            } else {
                baseOperationEnded()
            }
        }
    }
}

@Suite("Persistent queue: pauses (a downstream's Retry-After for everyone)", .timeLimit(.minutes(1)))
struct PauseTests {
    /// The names of the operations whose first attempt has started, in order.
    private func started(_ fixture: QueueFixture) -> [String] {
        fixture.lines.compactMap { line in line.hasSuffix("retry=false retries=0") ? String(line.prefix { $0 != "#" }) : nil }
    }

    @Test func aPauseOfTheQueueHoldsDueWorkUntilItsDateThenItRunsInOrder() async throws {
        let fixture = try QueueFixture(maxConcurrent: 1)
        // Given a queue paused for 30 s
        fixture.queue.pause(for: 30)
        #expect(fixture.queue.pauses == [PersistentQueuePause(tag: nil, until: fixture.clock.now.addingTimeInterval(30))])
        // When three operations are added
        for name in ["a", "b", "c"] { try fixture.queue.addOperation(fixture.upload(name)) }
        // Then none starts: they wait, holding no slot
        #expect(try await eventually { try fixture.queue.counts().waitingForConditions == 3 })
        #expect(fixture.lines.isEmpty)
        #expect(fixture.queue.operations().allSatisfy { $0.state == .waitingForConditions })
        // When the date comes
        await fixture.clock.waitForScheduledRetries(count: 1)
        fixture.clock.advance(by: 30)
        // Then they all run, in the order they were added, and the pause is gone
        await fixture.queue.allOperationsFinished()
        #expect(started(fixture) == ["a", "b", "c"])
        #expect(fixture.queue.pauses.isEmpty)
        #expect(try fixture.pendingRecords().isEmpty)
    }

    @Test func aPauseOfATagHoldsOnlyThatTagsOperationsAndEndsEarlyOnResume() async throws {
        let fixture = try QueueFixture(maxConcurrent: 2)
        fixture.queue.pause(for: 3600, taggedWith: "api")
        // Given an operation tagged "api" and one that is not
        let api = try fixture.queue.addOperation(fixture.upload("api"), options: EnqueueOptions(tags: ["api", "photos"])).id
        try fixture.queue.addOperation(fixture.upload("local"), options: EnqueueOptions(tags: ["photos"]))
        // Then only the untagged one runs
        #expect(try await eventually { try fixture.queue.counts().pending == 1 })
        #expect(started(fixture) == ["local"])
        #expect(fixture.queue.operation(withID: api)?.state == .waitingForConditions)
        // When the pause is ended early
        fixture.queue.resumeFromPause(taggedWith: "api")
        // Then the held one runs at once
        await fixture.queue.allOperationsFinished()
        #expect(started(fixture) == ["local", "api"])
        #expect(fixture.queue.pauses.isEmpty)
    }

    @Test func aRetryThatComesDueDuringAPauseWaitsWithoutSpendingARetry() async throws {
        let fixture = try QueueFixture(maxConcurrent: 1)
        // Given an operation whose first attempt hears "Retry-After": it pauses its tag and
        // retries without counting
        fixture.queue.register(ThrottledUpload.self)
        let upload = ThrottledUpload(payload: fixture.journal)
        upload.queue = fixture.queue
        try fixture.queue.addOperation(upload, options: EnqueueOptions(tags: ["api"]))
        // When its retry comes due (the queue's clock moves 1 s)
        // (once the retry's timer is armed beside the pause's)
        let now = fixture.clock.now
        #expect(try await eventually { fixture.queue.timer.scheduledDates.sorted() == [now, now.addingTimeInterval(60)] })
        await fixture.clock.waitForScheduledRetries(count: 1)
        fixture.clock.advance(by: 1)
        // Then it waits for the pause, holding no slot
        #expect(try await eventually { try fixture.queue.counts().waitingForConditions == 1 })
        #expect(fixture.lines == ["throttled#1 retry=false retries=0"])
        // When the pause ends
        await fixture.clock.waitForScheduledRetries(count: 1)
        fixture.clock.advance(by: 60)
        // Then the second attempt runs, and no retry was counted
        _ = await upload.finalOutcome
        #expect(fixture.lines == ["throttled#1 retry=false retries=0", "throttled#2 retry=true retries=0"])
        #expect(upload.outcome?.isSuccess == true)
    }

    @Test func aSecondPauseKeepsTheLaterDateAndAPassedDateDoesNothing() async throws {
        let fixture = try QueueFixture(maxConcurrent: 1)
        let now = fixture.clock.now
        // Given a pause until +60 s, then one until +30 s of the same scope, and one in the past
        fixture.queue.pause(until: now.addingTimeInterval(60))
        fixture.queue.pause(until: now.addingTimeInterval(30))
        fixture.queue.pause(until: now.addingTimeInterval(-5), taggedWith: "other")
        fixture.queue.pause(for: .nan, taggedWith: "other")
        // Then the later date is kept, and nothing else is in force
        #expect(fixture.queue.pauses == [PersistentQueuePause(tag: nil, until: now.addingTimeInterval(60))])
        try fixture.queue.addOperation(fixture.upload("held"))
        #expect(try await eventually { try fixture.queue.counts().waitingForConditions == 1 })
        // When the clock passes the earlier date
        await fixture.clock.waitForScheduledRetries(count: 1)
        fixture.clock.advance(by: 45)
        try await Task.sleep(nanoseconds: 100_000_000)
        // Then it still waits
        #expect(fixture.lines.isEmpty)
        // When a longer pause replaces it and its own date passes
        fixture.queue.pause(until: now.addingTimeInterval(120))
        fixture.clock.advance(by: 20)   // +65 s
        try await Task.sleep(nanoseconds: 100_000_000)
        #expect(fixture.lines.isEmpty)
        // And when the later date comes, it runs
        fixture.clock.advance(by: 60)   // +125 s
        await fixture.queue.allOperationsFinished()
        #expect(started(fixture) == ["held"])
    }

    @Test func aPauseAndARunConditionBothHoldAnOperation() async throws {
        let fixture = try QueueFixture(maxConcurrent: 1)
        let online = ManualRunCondition(isSatisfied: false)
        fixture.queue.register(online, as: "network")
        fixture.queue.pause(for: 3600, taggedWith: "api")
        try fixture.queue.addOperation(fixture.upload("both"), options: EnqueueOptions(tags: ["api"], conditions: ["network"]))
        #expect(try await eventually { try fixture.queue.counts().waitingForConditions == 1 })
        // When the pause ends first, the condition still holds it
        fixture.queue.resumeFromPause(taggedWith: "api")
        try await Task.sleep(nanoseconds: 100_000_000)
        #expect(fixture.lines.isEmpty)
        // And when the condition holds, it runs
        online.isSatisfied = true
        await fixture.queue.allOperationsFinished()
        #expect(started(fixture) == ["both"])
    }
}
