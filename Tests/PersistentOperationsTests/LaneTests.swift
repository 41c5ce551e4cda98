import Foundation
import Testing
@testable import PersistentOperations

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

@Suite("Persistent queue: ordered lanes", .timeLimit(.minutes(1)))
struct LaneTests {
    /// The names of the operations that started a first attempt, in order.
    private func firstAttempts(_ fixture: QueueFixture) -> [String] {
        fixture.lines.filter { $0.contains("#1 ") }.map { String($0.prefix { $0 != "#" }) }
    }

    @Test func operationsOfOneLaneRunOneAtATimeInAddOrderWhileOtherLanesRunBesideThem() async throws {
        // Given four slots, a lane whose first operation retries once after 10 s, two more
        // behind it, and an operation of another lane
        let fixture = try QueueFixture(maxConcurrent: 4)
        let chat = EnqueueOptions(tags: ["conversation"], lane: "chat:1")
        let first = try fixture.queue.addOperation(fixture.upload("a1", [.retry, .succeed]), options: chat).id
        let second = try fixture.queue.addOperation(fixture.upload("a2"), options: chat).id
        let third = try fixture.queue.addOperation(fixture.upload("a3"), options: chat).id
        try fixture.queue.addOperation(fixture.upload("b1"), options: EnqueueOptions(lane: "chat:2"))

        // When the first waits for its retry, then the other lane's operation has run
        #expect(try await eventually { try fixture.pendingRecords().first { $0.id == first.rawValue }?.numberOfRetries == 1 })
        #expect(try await eventually { fixture.lines.contains("b1#1 retry=false retries=0") })

        // Then the waiting retry keeps the lane: nothing behind it has started, and they wait
        // without slots, in order
        #expect(firstAttempts(fixture).sorted() == ["a1", "b1"])
        let infos = Dictionary(uniqueKeysWithValues: fixture.queue.operations().map { ($0.id, $0) })
        #expect(infos[first]?.state == .waitingToRetry && infos[first]?.lanePosition == 0)
        #expect(infos[second]?.state == .waitingForLane && infos[second]?.lanePosition == 1 && infos[second]?.lane == "chat:1")
        #expect(infos[third]?.state == .waitingForLane && infos[third]?.lanePosition == 2)
        let counts = try fixture.queue.counts()
        #expect(counts.waitingForLane == 2 && counts.pending >= 3)
        #expect(fixture.queue.numberOfOperations(taggedWith: "conversation") == 3)
        #expect(fixture.queue.operations(inLane: "chat:1").map(\.id) == [first, second, third])
        #expect(fixture.queue.numberOfOperations(inLane: "chat:1") == 3)
        #expect(fixture.queue.numberOfOperations(inLane: "chat:9") == 0)
        #expect(fixture.deliveredEvents().contains(.waitingForLane(third, lane: "chat:1", ahead: 2)))

        // And once the retry succeeds, the rest of the lane runs in order (the clock moves once
        // the retry's timer is set: the record is rewritten before the wait begins)
        let retryDue = fixture.clock.now.addingTimeInterval(10)
        #expect(try await eventually { fixture.queue.timer.scheduledDates.contains(retryDue) })
        fixture.clock.advance(by: 10)
        await fixture.queue.allOperationsFinished()
        let lane = fixture.lines.filter { $0.hasPrefix("a") }
        #expect(lane == ["a1#1 retry=false retries=0", "a1#2 retry=true retries=1", "a2#1 retry=false retries=0", "a3#1 retry=false retries=0"])
        #expect(try fixture.pendingRecords().isEmpty)
    }

    @Test func theLaneMovesOnHoweverAnOperationEndsAndACancelNeverTakesTheOperationsBehind() async throws {
        // Given a lane: one that fails for good, one that hangs, one that expires in 5 s while
        // it waits for its turn, and one that succeeds
        let fixture = try QueueFixture(maxConcurrent: 4)
        let lane = EnqueueOptions(lane: "chat:1")
        try fixture.queue.addOperation(fixture.upload("failing", [.fail]), options: lane)
        let hanging = try fixture.queue.addOperation(fixture.upload("hanging", [.hang]), options: lane).id
        var expiring = lane
        expiring.expirationDate = fixture.clock.now.addingTimeInterval(5)
        let expired = try fixture.queue.addOperation(fixture.upload("expiring"), options: expiring).id
        try fixture.queue.addOperation(fixture.upload("last"), options: lane)

        // When the failure has ended its turn, the hanging one runs
        #expect(try await eventually { fixture.lines.contains("hanging#1 retry=false retries=0") })
        // and the third expires while it waits
        fixture.clock.advance(by: 5)
        #expect(try await eventually { try fixture.failedRecords().contains { $0.id == expired.rawValue } })
        // and the hanging one is cancelled
        #expect(fixture.queue.cancelOperation(withID: hanging))
        await fixture.queue.allOperationsFinished()

        // Then the last one ran, after the others, and the expired one never did
        #expect(firstAttempts(fixture) == ["failing", "hanging", "last"])
        #expect(try fixture.failedRecords().count == 2)
        #expect(try fixture.pendingRecords().isEmpty)
        #expect(fixture.deliveredEvents().contains(.cancelled(hanging)))
    }

    @Test func aLaneThatHoldsOnAFailureWaitsUntilTheFailureIsRequeuedThenUntilOneIsPurged() async throws {
        // Given a lane that holds on a failure: an operation that fails once, then one more
        let fixture = try QueueFixture(maxConcurrent: 2)
        let holding = EnqueueOptions(lane: "chat:1", holdsLaneOnFailure: true)
        let failing = try fixture.queue.addOperation(fixture.upload("failing", [.fail, .succeed]), options: holding).id
        let next = try fixture.queue.addOperation(fixture.upload("next", [.fail]), options: holding).id
        try fixture.queue.addOperation(fixture.upload("after"), options: holding)

        // When the first fails for good
        #expect(try await eventually { try fixture.failedRecords().count == 1 })
        // Then the lane holds: the queue counts as finished, the others wait, and the failed
        // record is saved as holding the lane
        await fixture.queue.allOperationsFinished()
        #expect(firstAttempts(fixture) == ["failing"])
        #expect(try fixture.queue.counts().waitingForLane == 2)
        #expect(fixture.queue.operations().allSatisfy { $0.state == .waitingForLane && $0.lanePosition == nil })
        #expect(try fixture.failedRecords().first?.isHoldingLane == true)
        #expect(fixture.deliveredEvents().contains(.laneHeld(lane: "chat:1", by: failing)))

        // When it is re-queued, it runs first, succeeds, and the next one runs and fails too
        try fixture.queue.retryFailedOperation(withID: failing)
        #expect(try await eventually { try fixture.failedRecords().map(\.id) == [next.rawValue] })
        await fixture.queue.allOperationsFinished()
        #expect(fixture.lines.filter { $0.hasPrefix("failing") }.count == 2)
        #expect(firstAttempts(fixture) == ["failing", "next"])

        // When that failure is purged, the lane moves on
        try fixture.queue.purgeFailedOperation(withID: next)
        #expect(try await eventually { firstAttempts(fixture) == ["failing", "next", "after"] })
        await fixture.queue.allOperationsFinished()
        #expect(try fixture.pendingRecords().isEmpty && fixture.failedRecords().isEmpty)
    }

    @Test func aHeldLaneStaysHeldAfterARelaunchUntilItsFailureIsPurged() async throws {
        // Given a launch whose lane held on a failure
        let directory = try TemporaryDirectory()
        let journal = UUID().uuidString
        do {
            let fixture = try QueueFixture(directory: directory, journal: journal)
            let holding = EnqueueOptions(lane: "chat:1", holdsLaneOnFailure: true)
            try fixture.queue.addOperation(fixture.upload("failing", [.fail]), options: holding)
            try fixture.queue.addOperation(fixture.upload("waiting"), options: holding)
            #expect(try await eventually { try fixture.failedRecords().count == 1 })
            await fixture.queue.allOperationsFinished()
            fixture.queue.close()
        }

        // When the app is launched again and restores
        let fixture = try QueueFixture(directory: directory, journal: journal)
        let report = try fixture.queue.restore()
        #expect(report.restored.count == 1)
        await fixture.queue.allOperationsFinished()

        // Then the lane still holds, until the failure is purged
        #expect(fixture.lines == ["failing#1 retry=false retries=0"])
        #expect(fixture.queue.operations().map(\.state) == [.waitingForLane])
        let failed = try #require(try fixture.queue.failedOperations().first)
        try fixture.queue.purgeFailedOperation(withID: failed.id)
        #expect(try await eventually { fixture.lines.last == "waiting#1 retry=false retries=0" })
        await fixture.queue.allOperationsFinished()
        #expect(try fixture.pendingRecords().isEmpty)
    }

    @Test func aRestoreRebuildsEachLaneInAddOrderWhateverThePriorities() async throws {
        // Given a launch that stored a lane whose later operations have higher priorities,
        // and an operation of no lane
        let directory = try TemporaryDirectory()
        let clock = ManualRetryScheduler()
        let events = Locked<[PersistentOperationEvent]>([])
        let journal = UUID().uuidString
        try QueueFixture.earlierLaunch(directory, clock: clock, events: events) { queue in
            let priorities: [Operation.QueuePriority] = [.veryLow, .veryHigh, .normal]
            for (index, priority) in priorities.enumerated() {
                let operation = ScriptedUpload(payload: UploadPayload(name: "x\(index + 1)", journal: journal))
                operation.queuePriority = priority
                try queue.addOperation(operation, options: EnqueueOptions(lane: "album"))
            }
            try queue.addOperation(ScriptedUpload(payload: UploadPayload(name: "free", journal: journal)))
        }
        // Whose records say so, in the journal's format version for lanes
        let stored = try ReadOnlyPersistentStore(directory: directory.store).pendingRecords().records
        #expect(stored.filter { $0.lane == "album" }.count == 3)
        let records = try RecordStore(directory: directory.store, access: .readOnly).loadPending().records
        #expect(records.allSatisfy { $0.formatVersion == ($0.lane == nil ? 5 : 6) })

        // When the app is launched again with one slot
        let fixture = try QueueFixture(maxConcurrent: 1, directory: directory, journal: journal)
        try fixture.queue.restore()
        await fixture.queue.allOperationsFinished()

        // Then the lane ran in add order
        #expect(firstAttempts(fixture).filter { $0.hasPrefix("x") } == ["x1", "x2", "x3"])
        #expect(Set(firstAttempts(fixture)) == ["x1", "x2", "x3", "free"])
    }

    @Test func anAddIntoALaneBeforeRestoreWaitsForTheStoredOperationsOfThatLane() async throws {
        // Given a launch that left an operation of a lane pending
        let directory = try TemporaryDirectory()
        let clock = ManualRetryScheduler()
        let events = Locked<[PersistentOperationEvent]>([])
        let journal = UUID().uuidString
        try QueueFixture.earlierLaunch(directory, clock: clock, events: events) { queue in
            try queue.addOperation(ScriptedUpload(payload: UploadPayload(name: "stored", journal: journal)), options: EnqueueOptions(lane: "chat:1"))
        }

        // When the next launch adds to that lane, and to another, before it restores
        let fixture = try QueueFixture(maxConcurrent: 2, directory: directory, journal: journal)
        try fixture.queue.addOperation(fixture.upload("new"), options: EnqueueOptions(lane: "chat:1"))
        try fixture.queue.addOperation(fixture.upload("other"), options: EnqueueOptions(lane: "chat:2"))

        // Then the other lane runs, and the add into the stored lane waits for the restore
        #expect(try await eventually { fixture.lines == ["other#1 retry=false retries=0"] })
        // (once the other lane's attempt, which journals as it starts, has finished)
        #expect(try await eventually { fixture.queue.operations().map(\.state) == [.waitingForLane] })
        #expect(fixture.lines == ["other#1 retry=false retries=0"])
        try fixture.queue.restore()
        await fixture.queue.allOperationsFinished()
        #expect(firstAttempts(fixture) == ["other", "stored", "new"])
    }

    @Test func aBatchJoinsItsLaneInBatchOrderAndMayNotDependOnALaterMemberOfIt() async throws {
        // Given a batch of 500 added with a lane to a queue of four slots
        let fixture = try QueueFixture(maxConcurrent: 4)
        let names = (0..<500).map { "m\($0)" }
        try fixture.queue.addOperations(names.map { fixture.upload($0) }, options: EnqueueOptions(lane: "chat:1"))
        await fixture.queue.allOperationsFinished()
        // Then they ran one at a time, in batch order
        #expect(firstAttempts(fixture) == names)

        // And a batch whose first operation depends on its second is refused, storing nothing
        let first = fixture.upload("first"), second = fixture.upload("second")
        first.addDependency(second)
        #expect {
            try fixture.queue.addOperations([first, second], options: EnqueueOptions(lane: "chat:1"))
        } throws: { ($0 as? PersistenceError)?.code == .invalidDependency }
        #expect(try fixture.pendingRecords().isEmpty)
    }

    @Test func aLaneOf10000OperationsRunsEveryOneOnceInAddOrder() async throws {
        // Given a lane of 10,000 plain operations (1,000 under the sanitizer, which slows every
        // step down), added in batches to a suspended queue of four slots
        let length = isRunningUnderThreadSanitizer ? 1_000 : 10_000
        let fixture = try QueueFixture(maxConcurrent: 4, suspended: true)
        for batch in stride(from: 0, to: length, by: 1_000) {
            try fixture.queue.addOperations((batch..<min(batch + 1_000, length)).map { fixture.note("n\($0)") }, options: EnqueueOptions(lane: "long"))
        }
        #expect(fixture.queue.numberOfOperations(inLane: "long") == length)

        // When the queue runs
        fixture.queue.isSuspended = false
        await fixture.queue.allOperationsFinished()

        // Then every one ran once, in add order, and the store is empty. (That the time grows
        // linearly with the lane's length is measured by benchmark L1, against a serial queue.)
        #expect(fixture.lines == (0..<length).map { "n\($0) ran" })
        // (read once the queue is closed, when nothing more is written)
        fixture.queue.close()
        #expect(try fixture.pendingRecords().isEmpty)
    }

    @Test func anOperationWhoseTurnHasComeStillWaitsForItsPrerequisites() async throws {
        // Given a photo that retries once, outside any lane, and two messages of a lane, the
        // first of which waits for the photo
        let fixture = try QueueFixture(maxConcurrent: 4)
        let photo = fixture.upload("photo", [.retry, .succeed])
        let message = fixture.upload("message")
        message.addDependency(photo)
        try fixture.queue.addOperation(photo)
        let lane = EnqueueOptions(lane: "chat:1")
        try fixture.queue.addOperation(message, options: lane)
        let later = try fixture.queue.addOperation(fixture.upload("later"), options: lane).id

        // When the photo waits for its retry
        #expect(try await eventually { try fixture.pendingRecords().first { $0.lane == nil }?.numberOfRetries == 1 })
        // Then neither message has run: the first waits for the photo, and holds the lane
        #expect(fixture.lines == ["photo#1 retry=false retries=0"])
        #expect(fixture.queue.operations().first { $0.id == later }?.state == .waitingForLane)

        // And once the photo succeeds, they run in order
        let retryDue = fixture.clock.now.addingTimeInterval(10)
        #expect(try await eventually { fixture.queue.timer.scheduledDates.contains(retryDue) })
        fixture.clock.advance(by: 10)
        await fixture.queue.allOperationsFinished()
        #expect(firstAttempts(fixture) == ["photo", "message", "later"])
    }

    @Test(arguments: [false, true])
    func anOperationMovedAsideAfterCrashingTheProcessEndsItsTurnOrHoldsItsLane(holds: Bool) async throws {
        // Given a lane whose first operation crashes the process at every attempt
        var fixture = try QueueFixture(maxConcurrent: 4)
        let lane = EnqueueOptions(lane: "chat:1", holdsLaneOnFailure: holds)
        try fixture.queue.addOperation(fixture.upload("poison", [.hang]), options: lane)
        try fixture.queue.addOperation(fixture.upload("next"), options: lane)
        // When it crashes launch after launch, until crash-loop protection moves it aside
        var report = RestoreReport()
        var crashedLaunches = 0
        for launch in 1...6 {
            #expect(try await eventually { fixture.lines.count == launch })
            crashedLaunches = launch
            fixture.queue.close()
            try fixture.directory.noteCrash(signal: SIGSEGV)
            fixture = try QueueFixture(maxConcurrent: 4, directory: fixture.directory, journal: fixture.journal)
            report = try fixture.queue.restore()
            if !report.movedToFailedAfterCrashes.isEmpty { break }
        }
        #expect(report.movedToFailedAfterCrashes.count == 1)
        await fixture.queue.allOperationsFinished()

        // Then the next one of the lane runs, or, when the lane holds on a failure, waits until
        // the poison is purged
        if holds {
            #expect(fixture.queue.operations().map(\.state) == [.waitingForLane])
            #expect(try fixture.failedRecords().first?.isHoldingLane == true)
            let failed = try #require(try fixture.queue.failedOperations().first)
            try fixture.queue.purgeFailedOperation(withID: failed.id)
            await fixture.queue.allOperationsFinished()
        }
        // (and nothing but the poison ran in the launches it crashed)
        #expect(fixture.lines.count == crashedLaunches + 1)
        #expect(fixture.lines.prefix(crashedLaunches).allSatisfy { $0.hasPrefix("poison#") })
        #expect(fixture.lines.last == "next#1 retry=false retries=0")
        #expect(try fixture.pendingRecords().isEmpty)
    }

    @Test func aReplacingAddLeavesTheLaneOfTheOperationItReplacesAndJoinsItsLaneAtTheEnd() async throws {
        // Given a lane: one that hangs, a draft with a unique key, and one more
        let fixture = try QueueFixture(maxConcurrent: 4)
        let lane = EnqueueOptions(lane: "chat:1")
        let hanging = try fixture.queue.addOperation(fixture.upload("hanging", [.hang]), options: lane).id
        var keyed = lane
        keyed.uniqueKey = "draft"
        keyed.ifUniqueKeyExists = .replaceExisting
        try fixture.queue.addOperation(fixture.upload("draft-1"), options: keyed)
        try fixture.queue.addOperation(fixture.upload("other"), options: lane)
        #expect(try await eventually { fixture.lines == ["hanging#1 retry=false retries=0"] })
        // When the draft is replaced while it waits, and the hanging one is cancelled
        let result = try fixture.queue.addOperation(fixture.upload("draft-2"), options: keyed)
        #expect(result.disposition != .added)
        #expect(try await eventually { fixture.queue.operations().count == 3 })
        #expect(fixture.queue.cancelOperation(withID: hanging))
        await fixture.queue.allOperationsFinished()
        // Then the replaced draft never ran, and the new one ran last, in its place at the end
        #expect(firstAttempts(fixture) == ["hanging", "other", "draft-2"])
    }

    @Test func eventsComeWithTheTypeTagsAndLaneOfTheirOperation() async throws {
        // Given a message of a lane, with a tag, that succeeds, and one of no lane that fails
        let fixture = try QueueFixture(maxConcurrent: 2)
        let sent = try fixture.queue.addOperation(fixture.upload("sent"), options: EnqueueOptions(tags: ["chat:1"], lane: "chat:1")).id
        let refused = try fixture.queue.addOperation(fixture.upload("refused", [.fail]), options: EnqueueOptions()).id
        await fixture.queue.allOperationsFinished()
        fixture.queue.hub.flush()
        // Then the handler with subjects got both ends with what each operation was
        let subjects = fixture.subjects.withLock { $0 }
        #expect(subjects.contains {
            $0.event == .succeeded(sent) && $0.subject?.typeIdentifier == ScriptedUpload.persistenceIdentifier
                && $0.subject?.tags == ["chat:1"] && $0.subject?.lane == "chat:1" && $0.subject?.attempt == 1
        })
        #expect(subjects.contains { event, subject in
            if case .failed(refused, _) = event { subject?.typeIdentifier == ScriptedUpload.persistenceIdentifier && subject?.lane == nil } else { false }
        })
        // And every event of an operation the queue tracked had its subject, in the same order
        #expect(subjects.map(\.event) == fixture.deliveredEvents())
        #expect(subjects.filter { $0.event.operationID != nil && $0.subject == nil }.map(\.event) == [])
    }

    @Test func optionsALaneCannotTakeAreRefusedWithAClearError() throws {
        let fixture = try QueueFixture(suspended: true)
        let refused: [(EnqueueOptions, String)] = [
            (EnqueueOptions(repeating: .every(60), lane: "chat:1"), "periodic"),
            (EnqueueOptions(lane: ""), "empty"),
            (EnqueueOptions(holdsLaneOnFailure: true), "without options.lane"),
        ]
        for (options, reason) in refused {
            #expect {
                try fixture.queue.addOperation(fixture.upload("refused"), options: options)
            } throws: { error in
                let error = error as? PersistenceError
                return error?.code == .invalidOptions && error?.message.contains(reason) == true
            }
        }
        #expect(try fixture.pendingRecords().isEmpty)
    }

    @Test func aRecordInALaneIsWrittenInFormatVersionSixAndReadsBackTheSame() throws {
        var record = try makeRecord()
        record.lane = "chat:42"
        record.laneHoldsOnFailure = true
        record.isHoldingLane = true
        #expect(record.journalFormatVersion == 6 && record.requiredFormatVersion == 6)
        let file = try RecordFormat.encode(record, formatVersion: record.journalFormatVersion)
        #expect(file[file.startIndex + 8] == 0 && file[file.startIndex + 9] == 6)
        let decoded = try RecordFormat.decode(file)
        #expect(decoded == record && decoded.lane == "chat:42" && decoded.laneHoldsOnFailure && decoded.isHoldingLane)
        // A record of no lane stays in version 5, which readers of version 5 read
        #expect(try makeRecord().journalFormatVersion == 5)
    }
}
