import Foundation
import Testing
@testable import PersistentOperations

@Suite("Persistent queue: run conditions", .timeLimit(.minutes(2)))
struct RunConditionQueueTests {
    @Test func anOperationWhoseConditionDoesNotHoldWaitsWithoutASlotAndStartsWhenItHolds() async throws {
        // Given a one-slot queue with a "network" condition that does not hold
        let fixture = try QueueFixture(maxConcurrent: 1)
        let network = ManualRunCondition(isSatisfied: false)
        fixture.queue.register(network, as: "network")
        // When an upload that needs it and one that does not are added
        let waiting = try fixture.queue.addOperation(fixture.upload("needs network"), options: EnqueueOptions(conditions: ["network"])).id
        try fixture.queue.addOperation(fixture.upload("offline work"))
        // Then the other one runs; the first waits, saved with its condition, holding nothing
        #expect(try await eventually { fixture.lines == ["offline work#1 retry=false retries=0"] })
        #expect(try await eventually { try fixture.queue.counts().waitingForConditions == 1 })
        #expect(fixture.queue.operation(withID: waiting)?.state == .waitingForConditions)
        #expect(fixture.queue.operation(withID: waiting)?.conditions == ["network"])
        let record = try #require(try fixture.pendingRecords().first)
        #expect(record.conditions == ["network"] && record.requiredFormatVersion == 3)
        #expect(fixture.clock.pendingCount == 0)                  // no timer
        // no slot (once the other one's slot, which may still be finishing, has left)
        #expect(try await eventually { fixture.queue.operationQueue.operationCount == 0 })
        // When the condition holds, it starts at once
        network.isSatisfied = true
        await fixture.queue.allOperationsFinished()
        #expect(fixture.lines.last == "needs network#1 retry=false retries=0")
    }

    @Test func aDueRetryWaitsForItsConditionWithoutSpendingAnotherRetry() async throws {
        let fixture = try QueueFixture()
        let network = ManualRunCondition(isSatisfied: true)
        fixture.queue.register(network, as: "network")
        try fixture.queue.addOperation(fixture.upload("sync", [.retry, .succeed], retryDelay: 10), options: EnqueueOptions(conditions: ["network"]))
        #expect(try await eventually { try fixture.pendingRecords().first?.numberOfRetries == 1 })
        await fixture.clock.waitForScheduledRetries(count: 1)   // the retry timer
        // The network goes away during the wait; the retry comes due
        network.isSatisfied = false
        #expect(try await eventually { fixture.queue.state.withLock { $0.conditionStates["network"] } == false })
        fixture.clock.advance(by: 10)
        #expect(try await eventually { try fixture.queue.counts().waitingForConditions == 1 })
        #expect(fixture.lines == ["sync#1 retry=false retries=0"])
        // It comes back: the retry runs, still the first one
        network.isSatisfied = true
        await fixture.queue.allOperationsFinished()
        #expect(fixture.lines == ["sync#1 retry=false retries=0", "sync#2 retry=true retries=1"])
    }

    @Test func aConditionFlippingManyTimesRunsEachOperationOnceAndLosesNone() async throws {
        let fixture = try QueueFixture(maxConcurrent: 4)
        let network = ManualRunCondition(isSatisfied: false)
        fixture.queue.register(network, as: "network")
        for index in 0..<200 {
            try fixture.queue.addOperation(fixture.upload("u\(index)"), options: EnqueueOptions(conditions: ["network"]))
        }
        for flip in 0..<400 {
            network.isSatisfied = flip % 2 == 0
            if flip % 50 == 0 { try await Task.sleep(for: .milliseconds(1)) }
        }
        network.isSatisfied = true
        await fixture.queue.allOperationsFinished()
        let names = fixture.lines.map { String($0.prefix { $0 != "#" }) }
        #expect(names.count == 200)
        #expect(Set(names).count == 200)
        #expect(try fixture.pendingRecords().isEmpty)
    }

    @Test func aFloodOfTenThousandWaitingOperationsIsReleasedAtOnceInRunOrder() async throws {
        // Given 10,000 operations (one batch; 1,000 under Thread Sanitizer, whose slowdown would
        // starve the tests running beside it) waiting for one condition on a serial queue
        let count = isRunningUnderThreadSanitizer ? 1_000 : 10_000
        let fixture = try QueueFixture(maxConcurrent: 1)
        let gate = ManualRunCondition(isSatisfied: false)
        fixture.queue.register(gate, as: "gate")
        let operations: [any PersistentOperation] = (0..<count).map { fixture.upload("f\($0)") }
        // (Ten thousand records saved in one call: on a thread of its own, not one of the few
        // threads that run every test)
        _ = try await onDedicatedThread { try fixture.queue.addOperations(operations, options: EnqueueOptions(conditions: ["gate"])) }
        #expect(try await eventually { try fixture.queue.counts().waitingForConditions == count })
        #expect(fixture.lines.isEmpty)
        #expect(fixture.queue.operationQueue.operationCount == 0)
        // When it holds, every one runs once, in enqueue order as far as the queue decides it:
        // the ready operations leave in that order, and only the window of slots handed to the
        // `OperationQueue` at a time (which orders them itself) may run a little out of turn
        gate.isSatisfied = true
        await fixture.queue.allOperationsFinished()
        let started = fixture.lines.compactMap { Int($0.dropFirst().prefix { $0 != "#" }) }
        #expect(started.sorted() == Array(0..<count))
        let farthestAhead = started.enumerated().map { $0.element - $0.offset }.max() ?? 0
        #expect(farthestAhead < fixture.queue.slotWindow())
    }

    @Test func addingWithAConditionNoProviderIsRegisteredForThrowsAndStoresNothing() throws {
        let fixture = try QueueFixture()
        #expect(throws: PersistenceError.self) {
            try fixture.queue.addOperation(fixture.upload("x"), options: EnqueueOptions(conditions: ["charging"]))
        }
        do {
            try fixture.queue.addOperation(fixture.upload("x"), options: EnqueueOptions(conditions: ["charging"]))
        } catch let error as PersistenceError {
            #expect(error.code == .unknownCondition)
            #expect(error.message.contains("\"charging\""))
        }
        #expect(try fixture.pendingRecords().isEmpty)
    }

    @Test func aRestoredRecordNamingAnUnregisteredConditionWaitsIsReportedAndRunsOnceOneIsRegistered() async throws {
        // Given a store whose record waits for "charging", left by a launch that registered it
        let directory = try TemporaryDirectory()
        let clock = ManualRetryScheduler()
        let events = Locked<[PersistentOperationEvent]>([])
        let journal = UUID().uuidString
        let id = try QueueFixture.earlierLaunch(directory, clock: clock, events: events) { first in
            first.register(ManualRunCondition(isSatisfied: false), as: "charging")
            let id = try first.addOperation(ScriptedUpload(payload: UploadPayload(name: "backup", journal: journal)),
                                             options: EnqueueOptions(conditions: ["charging"])).id
            return id
        }
        // When the next launch restores without registering it
        let queue = try QueueFixture.open(directory, clock: clock, events: events)
        let report = try queue.restore()
        // Then the record is reported, waits and is kept
        #expect(report.unknownConditions == [UnknownConditionRecord(id: id, conditions: ["charging"])])
        #expect(try await eventually { try queue.counts().waitingForConditions == 1 })
        try await Task.sleep(for: .milliseconds(20))
        #expect(Journal.lines(journal).isEmpty)
        queue.hub.flush()
        #expect(events.withLock { $0 }.contains(.unknownConditions(id, conditions: ["charging"])))
        // And once a provider is registered and holds, it runs
        queue.register(ManualRunCondition(isSatisfied: true), as: "charging")
        await queue.allOperationsFinished()
        #expect(Journal.lines(journal) == ["backup#1 retry=false retries=0"])
    }

    @Test func anOperationWaitingForItsConditionStillExpiresAndCanBeCancelled() async throws {
        let fixture = try QueueFixture()
        let network = ManualRunCondition(isSatisfied: false)
        fixture.queue.register(network, as: "network")
        var options = EnqueueOptions(conditions: ["network"])
        options.expirationDate = fixture.clock.now.addingTimeInterval(30)
        let expiring = try fixture.queue.addOperation(fixture.upload("expiring"), options: options).id
        let cancelled = try fixture.queue.addOperation(fixture.upload("cancelled"), options: EnqueueOptions(conditions: ["network"])).id
        #expect(try await eventually { try fixture.queue.counts().waitingForConditions == 2 })
        #expect(fixture.queue.cancelOperation(withID: cancelled))
        fixture.clock.advance(by: 30)
        await fixture.queue.allOperationsFinished()
        #expect(fixture.lines.isEmpty)
        #expect(try fixture.queue.failedOperations().map(\.id) == [expiring])
        network.isSatisfied = true   // nothing left waiting under it
        #expect(fixture.queue.state.withLock { $0.conditionWaiters.isEmpty })
    }

    @Test func releasedOperationsStartInPriorityThenEnqueueOrder() async throws {
        let fixture = try QueueFixture(maxConcurrent: 1)
        let gate = ManualRunCondition(isSatisfied: false)
        fixture.queue.register(gate, as: "gate")
        for (name, priority) in [("low", Operation.QueuePriority.low), ("n1", .normal), ("high", .high), ("n2", .normal)] {
            let upload = fixture.upload(name)
            upload.queuePriority = priority
            try fixture.queue.addOperation(upload, options: EnqueueOptions(conditions: ["gate"]))
        }
        #expect(try await eventually { try fixture.queue.counts().waitingForConditions == 4 })
        gate.isSatisfied = true
        await fixture.queue.allOperationsFinished()
        #expect(fixture.lines.map { String($0.prefix { $0 != "#" }) } == ["high", "n1", "n2", "low"])
    }

    @Test func aConditionUnmetAtRestoreHoldsBackTheRestoredRecordUntilItHolds() async throws {
        let directory = try TemporaryDirectory()
        let clock = ManualRetryScheduler()
        let events = Locked<[PersistentOperationEvent]>([])
        let journal = UUID().uuidString
        try QueueFixture.earlierLaunch(directory, clock: clock, events: events) { first in
            first.register(ManualRunCondition(isSatisfied: true), as: "network")
            try first.addOperation(ScriptedUpload(payload: UploadPayload(name: "upload", journal: journal)),
                                    options: EnqueueOptions(conditions: ["network"]))
        }
        // The next launch registers the condition, offline, before restoring
        let queue = try QueueFixture.open(directory, clock: clock, events: events)
        let network = ManualRunCondition(isSatisfied: false)
        queue.register(network, as: "network")
        let report = try queue.restore()
        #expect(report.unknownConditions.isEmpty && report.restored.count == 1)
        #expect(try await eventually { try queue.counts().waitingForConditions == 1 })
        try await Task.sleep(for: .milliseconds(20))
        #expect(Journal.lines(journal).isEmpty)
        network.isSatisfied = true
        await queue.allOperationsFinished()
        #expect(Journal.lines(journal) == ["upload#1 retry=false retries=0"])
    }

    @Test func aRetryWaitingForItsConditionAtTheExpirationDateFailsAsExpired() async throws {
        let fixture = try QueueFixture()
        let network = ManualRunCondition(isSatisfied: true)
        fixture.queue.register(network, as: "network")
        let upload = fixture.upload("sync", [.retry, .succeed], retryDelay: 10)
        var options = EnqueueOptions(conditions: ["network"])
        options.expirationDate = fixture.clock.now.addingTimeInterval(30)
        try fixture.queue.addOperation(upload, options: options)
        await fixture.clock.waitForTotalScheduledRetries(count: 2)   // the expiration, then the retry timer
        network.isSatisfied = false
        #expect(try await eventually { fixture.queue.state.withLock { $0.conditionStates["network"] } == false })
        fixture.clock.advance(by: 10)   // the retry is due, and waits for the network
        #expect(try await eventually { try fixture.queue.counts().waitingForConditions == 1 })
        fixture.clock.advance(by: 20)   // the expiration date
        await fixture.queue.allOperationsFinished()
        #expect(fixture.lines == ["sync#1 retry=false retries=0"])
        #expect((upload.outcome?.error as? RetryingOperationError)?.code == .expired)
        #expect(try fixture.failedRecords().first?.failureReason?.contains("expired") == true)
    }

    @Test func aReleasedQueueStopsObservingItsConditions() throws {
        let network = ManualRunCondition(isSatisfied: false)
        do {
            let fixture = try QueueFixture()
            fixture.queue.register(network, as: "network")
            #expect(network.observerCount == 1)
        }
        #expect(network.observerCount == 0)
    }

    @Test func aRetryWaitingForASlotAtItsExpirationDateFailsAtOnce() async throws {
        // Given a serial queue busy with an attempt that never ends, and a retry of another
        // operation that came due behind it; the second one expires while it waits for the slot
        let fixture = try QueueFixture(maxConcurrent: 1)
        let upload = fixture.upload("flaky", [.retry, .succeed], retryDelay: 10)
        try fixture.queue.addOperation(upload, options: EnqueueOptions(expirationDate: fixture.clock.now.addingTimeInterval(30)))
        #expect(try await eventually { try fixture.pendingRecords().first?.numberOfRetries == 1 })
        await fixture.clock.waitForTotalScheduledRetries(count: 2)   // the expiration, then the retry timer
        try fixture.queue.addOperation(fixture.upload("busy", [.hang]))
        #expect(try await eventually { fixture.lines.contains("busy#1 retry=false retries=0") })
        fixture.clock.advance(by: 10)   // the retry is due: it waits for the busy slot
        #expect(try await eventually { fixture.queue.operations().contains { $0.state == .waitingToRetry && $0.numberOfRetries == 1 } })
        fixture.clock.advance(by: 20)   // the expiration date
        #expect(try await eventually { try fixture.failedRecords().count == 1 })
        #expect((upload.outcome?.error as? RetryingOperationError)?.code == .expired)
        #expect(!fixture.lines.contains { $0.hasPrefix("flaky#2") })
        fixture.queue.cancelAllOperations()
        await fixture.queue.allOperationsFinished()
    }

    @Test func theReadmesConditionExampleRunsTheUploadOnlyOnceTheNetworkIsBack() async throws {
        let fixture = try QueueFixture()
        let queue = fixture.queue
        let upload = fixture.upload("photo")
        // snippet: run-conditions
        let network = ManualRunCondition(isSatisfied: false)   // NetworkPathCondition() on Apple platforms
        queue.register(network, as: "network")                 // before restore() and before adding
        try queue.addOperation(upload, options: EnqueueOptions(conditions: ["network"]))
        // end snippet
        #expect(try await eventually { try queue.counts().waitingForConditions == 1 })
        #expect(fixture.lines.isEmpty)
        // snippet: run-conditions-release
        network.isSatisfied = true                             // what waited for the network starts now
        // end snippet
        await queue.allOperationsFinished()
        #expect(fixture.lines == ["photo#1 retry=false retries=0"])
    }
}
