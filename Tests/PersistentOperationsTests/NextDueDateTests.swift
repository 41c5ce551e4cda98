import Foundation
import Testing
@testable import PersistentOperations

@Suite("Persistent queue: next due date", .timeLimit(.minutes(1)))
struct NextDueDateTests {
    @Test func anEmptyQueueHasNone() throws {
        let fixture = try QueueFixture()
        #expect(fixture.queue.nextDueDate == nil)
    }

    @Test func theEarliestOfNotBeforeDatesAndRetryTimersIsReported() async throws {
        // Given an upload not due for 100 s, a retry due in 30 s, and a dependent of the first
        let fixture = try QueueFixture(maxConcurrent: 2)
        let now = fixture.clock.now
        let later = fixture.upload("later")
        try fixture.queue.addOperation(later, options: EnqueueOptions(notBefore: now.addingTimeInterval(100)))
        let dependent = fixture.upload("dependent")
        dependent.addDependency(later)
        try fixture.queue.addOperation(dependent)
        #expect(fixture.queue.nextDueDate == now.addingTimeInterval(100))
        try fixture.queue.addOperation(fixture.upload("flaky", [.retry, .succeed], retryDelay: 30))
        #expect(try await eventually { fixture.queue.nextDueDate == now.addingTimeInterval(30) })
        await fixture.clock.waitForTotalScheduledRetries(count: 2)   // the not-before date, then the retry timer
        // When the retry comes due and runs, the not-before date is next; the dependent,
        // waiting for its prerequisite, never counts
        fixture.clock.advance(by: 30)
        #expect(try await eventually { fixture.lines.contains("flaky#2 retry=true retries=1") })
        #expect(try await eventually { fixture.queue.nextDueDate == now.addingTimeInterval(100) })
        fixture.clock.advance(by: 70)
        await fixture.queue.allOperationsFinished()
        #expect(fixture.queue.nextDueDate == nil)
    }

    @Test func workDueNowOrWaitingForAConditionIsDueNow() async throws {
        // A suspended queue holds due work: due now
        let suspended = try QueueFixture(suspended: true)
        try suspended.queue.addOperation(suspended.upload("due"))
        #expect(suspended.queue.nextDueDate == suspended.clock.now)
        // Work waiting for a run condition is due now: the condition may hold when the app runs next
        let gated = try QueueFixture()
        gated.queue.register(ManualRunCondition(isSatisfied: false), as: "network")
        try gated.queue.addOperation(gated.upload("gated"), options: EnqueueOptions(notBefore: gated.clock.now.addingTimeInterval(10), conditions: ["network"]))
        #expect(gated.queue.nextDueDate == gated.clock.now.addingTimeInterval(10))
        gated.clock.advance(by: 10)
        #expect(try await eventually { try gated.queue.counts().waitingForConditions == 1 })
        #expect(gated.queue.nextDueDate == gated.clock.now)
    }

    @Test func aPeriodicSeriesIsDueWhenItsNextWindowOpens() async throws {
        // Given a series every hour with a 10-minute window, and a retry due in 40 minutes
        let fixture = try QueueFixture(maxConcurrent: 2)
        let now = fixture.clock.now
        try fixture.queue.addOperation(fixture.upload("hourly"), options: EnqueueOptions(repeating: .every(3600, flex: 600)))
        #expect(try await eventually { fixture.queue.operations().first?.completedPeriods == 1 })
        // Then between periods it is due at its window's start, not its target
        #expect(try await eventually { fixture.queue.nextDueDate == now.addingTimeInterval(3000) })
        try fixture.queue.addOperation(fixture.upload("flaky", [.retry, .succeed], retryDelay: 2400))
        #expect(try await eventually { fixture.queue.nextDueDate == now.addingTimeInterval(2400) })
        await fixture.clock.waitForTotalScheduledRetries(count: 2)
        fixture.clock.advance(by: 2400)
        #expect(try await eventually { fixture.lines.contains("flaky#2 retry=true retries=1") })
        #expect(try await eventually { fixture.queue.nextDueDate == now.addingTimeInterval(3000) })
    }

    @Test func restoredRecordsCountOnceRestored() throws {
        let directory = try TemporaryDirectory()
        let clock = ManualRetryScheduler()
        let events = Locked<[PersistentOperationEvent]>([])
        try QueueFixture.earlierLaunch(directory, clock: clock, events: events) { first in
            try first.addOperation(ScriptedUpload(payload: UploadPayload(name: "x", journal: "j")),
                                   options: EnqueueOptions(notBefore: clock.now.addingTimeInterval(600)))
        }
        let queue = try QueueFixture.open(directory, clock: clock, suspended: true, events: events)
        #expect(queue.nextDueDate == nil)   // not known before restore()
        try queue.restore()
        #expect(queue.nextDueDate == clock.now.addingTimeInterval(600))
    }
}
