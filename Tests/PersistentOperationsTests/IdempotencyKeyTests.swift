import Foundation
import Testing
@testable import PersistentOperations

/// Idempotency keys: a repeated add with a key the queue knows stores nothing and returns the
/// original ids, while the work is stored and for the window after it left, across relaunches.
@Suite("Persistent queue: idempotency keys", .timeLimit(.minutes(1)))
struct IdempotencyKeyTests {
    func relaunch(_ fixture: QueueFixture) throws -> QueueFixture {
        fixture.queue.close()
        return try QueueFixture(suspended: true, directory: fixture.directory, journal: fixture.journal)
    }

    @Test func aRepeatedAddWhileTheWorkIsPendingStoresNothingAndReturnsTheOriginal() throws {
        // Given an operation added with a key
        let fixture = try QueueFixture(suspended: true)
        let first = try fixture.queue.addOperation(fixture.upload("first"), options: EnqueueOptions(idempotencyKey: "request-1"))

        // When the same key is added again, with other work and other options
        let again = try fixture.queue.addOperation(fixture.upload("again"), options: EnqueueOptions(tags: ["other"], idempotencyKey: "request-1"))

        // Then nothing was stored and the original is returned
        #expect(first.disposition == .added)
        #expect(again == EnqueueResult(id: first.id, disposition: .keptExisting))
        #expect(try fixture.pendingRecords().map(\.id) == [first.id.rawValue])
        #expect(try fixture.pendingRecords().first?.idempotencyKey == "request-1")
        #expect(try ReadOnlyPersistentStore(directory: fixture.directory.store).record(withID: first.id)?.idempotencyKey == "request-1")
        // And only the first add was reported
        #expect(fixture.deliveredEvents() == [.enqueued(first.id, typeIdentifier: ScriptedUpload.persistenceIdentifier)])
        // And another key is another add
        let other = try fixture.queue.addOperation(fixture.upload("other"), options: EnqueueOptions(idempotencyKey: "request-2"))
        #expect(other.disposition == .added && other.id != first.id)
    }

    @Test func aKeyIsRememberedForTheWindowAfterItsWorkSucceededThenForgotten() async throws {
        // Given an operation added with a key, which ran and succeeded
        let fixture = try QueueFixture()
        let first = try fixture.queue.addOperation(fixture.upload("first"), options: EnqueueOptions(idempotencyKey: "request-1"))
        await fixture.queue.allOperationsFinished()
        #expect(fixture.lines == ["first#1 retry=false retries=0"])
        #expect(try fixture.pendingRecords().isEmpty)

        // When the key is added again 299 s later (the window is 300 s)
        fixture.clock.advance(by: 299)
        let again = try fixture.queue.addOperation(fixture.upload("again"), options: EnqueueOptions(idempotencyKey: "request-1"))

        // Then nothing was stored and nothing ran again
        #expect(again == EnqueueResult(id: first.id, disposition: .keptExisting))
        await fixture.queue.allOperationsFinished()
        #expect(fixture.lines == ["first#1 retry=false retries=0"])

        // And once the window has passed, the key is free: the add runs new work
        fixture.clock.advance(by: 2)
        let later = try fixture.queue.addOperation(fixture.upload("later"), options: EnqueueOptions(idempotencyKey: "request-1"))
        #expect(later.disposition == .added && later.id != first.id)
        await fixture.queue.allOperationsFinished()
        #expect(fixture.lines == ["first#1 retry=false retries=0", "later#1 retry=false retries=0"])
    }

    @Test func aRepeatedBatchReturnsEveryMembersIdInOrderAndEachMemberCarriesTheKey() async throws {
        // Given a batch added with a key: an album and two uploads that depend on it
        let fixture = try QueueFixture(suspended: true)
        func graph(_ suffix: String) -> [ScriptedUpload] {
            let album = fixture.upload("album" + suffix)
            let uploads = [fixture.upload("a" + suffix), fixture.upload("b" + suffix)]
            for upload in uploads { upload.addDependency(album) }
            return [album] + uploads
        }
        let ids = try fixture.queue.addOperations(graph(""), options: EnqueueOptions(idempotencyKey: "import-9"))
        #expect(try fixture.pendingRecords().allSatisfy { $0.idempotencyKey == "import-9" })

        // When the producer sends the same batch again (and once as a single operation)
        let again = try fixture.queue.addOperations(graph("'"), options: EnqueueOptions(idempotencyKey: "import-9"))
        let single = try fixture.queue.addOperation(fixture.upload("single"), options: EnqueueOptions(idempotencyKey: "import-9"))

        // Then nothing was stored: the batch gets every id in the batch's order, the single
        // add the first
        #expect(again == ids)
        #expect(single == EnqueueResult(id: ids[0], disposition: .keptExisting))
        #expect(try fixture.pendingRecords().count == 3)

        // And while part of the batch has run, a repeat still returns all of it
        fixture.queue.isSuspended = false
        await fixture.queue.allOperationsFinished()
        #expect(Set(fixture.lines) == ["album#1 retry=false retries=0", "a#1 retry=false retries=0", "b#1 retry=false retries=0"])
        #expect(try fixture.queue.addOperations(graph("''"), options: EnqueueOptions(idempotencyKey: "import-9")) == ids)
        #expect(fixture.lines.count == 3)
    }

    @Test func aKeyIsKnownAfterARelaunchBeforeRestoreFromStoredAndFromRemovedRecords() async throws {
        // Given a launch that completed one keyed operation and left another pending
        let first = try QueueFixture()
        let done = try first.queue.addOperation(first.upload("done"), options: EnqueueOptions(idempotencyKey: "done-key"))
        await first.queue.allOperationsFinished()
        first.queue.isSuspended = true
        let stored = try first.queue.addOperation(first.upload("stored"), options: EnqueueOptions(idempotencyKey: "stored-key"))

        // When the next launch adds both keys again, before it calls restore()
        let second = try relaunch(first)
        let againDone = try second.queue.addOperation(second.upload("done'"), options: EnqueueOptions(idempotencyKey: "done-key"))
        let againStored = try second.queue.addOperation(second.upload("stored'"), options: EnqueueOptions(idempotencyKey: "stored-key"))

        // Then both are known: nothing is stored, and only the stored operation runs, once
        #expect(againDone == EnqueueResult(id: done.id, disposition: .keptExisting))
        #expect(againStored == EnqueueResult(id: stored.id, disposition: .keptExisting))
        let report = try second.queue.restore()
        #expect(report.restored == [stored.id])
        second.queue.isSuspended = false
        await second.queue.allOperationsFinished()
        #expect(second.lines == ["done#1 retry=false retries=0", "stored#1 retry=false retries=0"])
        second.queue.close()

        // And a launch after the window forgets the completed keys: both adds store new work
        let third = try QueueFixture(suspended: true, directory: first.directory, journal: first.journal)
        third.clock.advance(by: 301)
        let newDone = try third.queue.addOperation(third.upload("done''"), options: EnqueueOptions(idempotencyKey: "done-key"))
        let newStored = try third.queue.addOperation(third.upload("stored''"), options: EnqueueOptions(idempotencyKey: "stored-key"))
        #expect(newDone.disposition == .added && newStored.disposition == .added)
    }

    @Test func aFailedOperationKeepsItsKeyUntilPurgedAndForTheWindowAfter() async throws {
        // Given a keyed operation that failed for good
        let fixture = try QueueFixture()
        let failed = try fixture.queue.addOperation(fixture.upload("failing", [.fail]), options: EnqueueOptions(idempotencyKey: "k"))
        await fixture.queue.allOperationsFinished()
        #expect(try fixture.failedRecords().map(\.id) == [failed.id.rawValue])

        // When the key is added again long after, the failed record still holds it
        fixture.clock.advance(by: 3_600)
        #expect(try fixture.queue.addOperation(fixture.upload("x"), options: EnqueueOptions(idempotencyKey: "k")).id == failed.id)

        // And once purged, it is remembered for the window, then forgotten
        try fixture.queue.purgeFailedOperation(withID: failed.id)
        #expect(try fixture.queue.addOperation(fixture.upload("y"), options: EnqueueOptions(idempotencyKey: "k")).id == failed.id)
        fixture.clock.advance(by: 301)
        #expect(try fixture.queue.addOperation(fixture.upload("z"), options: EnqueueOptions(idempotencyKey: "k")).disposition == .added)
    }

    @Test func concurrentAddsOfOneKeyStoreItOnce() async throws {
        // Given a queue
        let fixture = try QueueFixture(suspended: true)

        // When 8 threads add the same key at once, 20 times each, and 8 other keys besides
        let results = Locked<[String: Set<PersistentOperationID>]>([:])
        await runOnThreads(8) { thread in
            for round in 0..<20 {
                let key = round.isMultiple(of: 2) ? "shared" : "own-\(thread)"
                let result = try! fixture.queue.addOperation(fixture.upload("t\(thread)r\(round)"), options: EnqueueOptions(idempotencyKey: key))
                results.withLock { _ = $0[key, default: []].insert(result.id) }
            }
        }

        // Then each key was stored once, and every add of it got that one id
        let ids = results.withLock { $0 }
        #expect(ids.count == 9)
        #expect(ids.values.allSatisfy { $0.count == 1 })
        #expect(try fixture.pendingRecords().count == 9)
    }

    @Test func aKeyThatIsEmptyOrTooLongIsRefusedAndNothingIsStored() throws {
        // Given a queue with a stored operation
        let fixture = try QueueFixture(suspended: true)
        try fixture.queue.addOperation(fixture.upload("kept"))

        // When keys that are empty or longer than 1,024 bytes are added
        for key in ["", String(repeating: "é", count: 513)] {
            #expect {
                try fixture.queue.addOperation(fixture.upload("refused"), options: EnqueueOptions(idempotencyKey: key))
            } throws: { ($0 as? PersistenceError)?.code == .invalidOptions }
            #expect {
                try fixture.queue.addOperations([fixture.upload("refused")], options: EnqueueOptions(idempotencyKey: key))
            } throws: { ($0 as? PersistenceError)?.code == .invalidOptions }
        }

        // Then nothing was stored, and the stored operation is still there; a key of 1,024
        // bytes, spaces and all, works
        #expect(try fixture.pendingRecords().count == 1)
        let longest = String(repeating: "é ", count: 341) + "."
        #expect(longest.utf8.count == 1_024)
        let added = try fixture.queue.addOperation(fixture.upload("longest"), options: EnqueueOptions(idempotencyKey: longest))
        #expect(try fixture.queue.addOperation(fixture.upload("again"), options: EnqueueOptions(idempotencyKey: longest)).id == added.id)
    }

    @Test func aNegativeWindowIsRefusedAndAWindowOfZeroForgetsTheKeyWithItsWork() async throws {
        let directory = try TemporaryDirectory()
        var configuration = PersistentOperationQueue.Configuration()
        configuration.idempotencyWindow = -1
        #expect {
            _ = try PersistentOperationQueue(directory: directory.store, operationQueue: OperationQueue(), configuration: configuration)
        } throws: { ($0 as? PersistenceError)?.code == .invalidOptions }

        configuration.idempotencyWindow = 0
        let operationQueue = OperationQueue()
        operationQueue.isSuspended = true   // the first stays pending until the repeat
        let queue = try PersistentOperationQueue(directory: directory.store, operationQueue: operationQueue, configuration: configuration)
        defer { queue.close() }
        queue.register(ScriptedUpload.self)
        let journal = UUID().uuidString
        func upload(_ name: String) -> ScriptedUpload { ScriptedUpload(payload: UploadPayload(name: name, journal: journal)) }
        let first = try queue.addOperation(upload("first"), options: EnqueueOptions(idempotencyKey: "k"))
        #expect(try queue.addOperation(upload("pending"), options: EnqueueOptions(idempotencyKey: "k")).id == first.id)
        operationQueue.isSuspended = false
        await queue.allOperationsFinished()
        #expect(try queue.addOperation(upload("after"), options: EnqueueOptions(idempotencyKey: "k")).disposition == .added)
    }

    @Test func aStoreOfTheEarlierLayoutRefusesKeysClearly() throws {
        let directory = try TemporaryDirectory()
        var configuration = PersistentOperationQueue.Configuration()
        configuration.storeEngine = .files
        let queue = try PersistentOperationQueue(directory: directory.store, operationQueue: OperationQueue(), configuration: configuration)
        defer { queue.close() }
        queue.register(ScriptedUpload.self)
        #expect {
            try queue.addOperation(ScriptedUpload(payload: UploadPayload(name: "x", journal: "j")), options: EnqueueOptions(idempotencyKey: "k"))
        } throws: { ($0 as? PersistenceError)?.code == .invalidOptions }
    }
}

/// The journal's side of idempotency keys: retire frames, compaction and damage.
@Suite("Journal store: remembered idempotency keys")
struct JournalRememberedKeyTests {
    final class Clock: Sendable {
        let now = Locked(Date(timeIntervalSinceReferenceDate: 1_000_000))
    }

    func configuration(_ clock: Clock) -> JournalStore.Configuration {
        var configuration = JournalStore.Configuration(compactsAutomatically: false)
        configuration.clock = { clock.now.withLock { $0 } }
        return configuration
    }

    func keyedRecord(_ index: Int, key: String) throws -> OperationRecord {
        var record = try makeRecord(index: index, sequence: UInt64(index))
        record.idempotencyKey = key
        return record
    }

    @Test func compactionCarriesRememberedKeysUntilTheyExpireThenDropsThem() throws {
        // Given a journal that removed two keyed records and keeps one
        let directory = try TemporaryDirectory()
        let clock = Clock()
        var store = try JournalStore(directory: directory.store, configuration: configuration(clock))
        let removed = try [keyedRecord(1, key: "a"), keyedRecord(2, key: "a")]
        let kept = try keyedRecord(3, key: "b")
        for record in removed + [kept] { try store.add(record) }
        for record in removed { try store.removePending(id: record.id) }

        // When it compacts and is opened again
        try store.compact()
        store.close()
        store = try JournalStore(directory: directory.store, configuration: configuration(clock))

        // Then the removed records are still found by their key, in order, and the kept one by its own
        #expect(store.records(withIdempotencyKey: "a") == removed.map(\.id))
        #expect(store.records(withIdempotencyKey: "b") == [kept.id])
        let sizeWhileRemembered = store.journalSize

        // And once the window has passed, they are forgotten, and the next compaction drops
        // their frames, also across a reopen
        clock.now.withLock { $0 += 301 }
        #expect(store.records(withIdempotencyKey: "a").isEmpty)
        try store.compact()
        #expect(store.journalSize < sizeWhileRemembered)
        store.close()
        store = try JournalStore(directory: directory.store, configuration: configuration(clock))
        defer { store.close() }
        #expect(store.records(withIdempotencyKey: "a").isEmpty)
        #expect(store.records(withIdempotencyKey: "b") == [kept.id])
    }

    @Test func aStoreHoldingOnlyRememberedKeysCompactsOnceAndNotAgain() async throws {
        // Given a store with automatic compaction whose every record was removed with a key
        let directory = try TemporaryDirectory()
        let clock = Clock()
        var settings = configuration(clock)
        settings.compactsAutomatically = true
        settings.segmentSize = 64 << 10
        settings.compactionMinimumSize = 64 << 10
        let store = try JournalStore(directory: directory.store, configuration: settings)
        defer { store.close() }

        // When it adds and removes 1,000 keyed records (several segments; their retire frames
        // alone fill more than the compaction minimum)
        var ids: [String] = []
        for index in 0..<1_000 {
            let record = try keyedRecord(index, key: "key-\(index)")
            try store.add(record)
            try store.removePending(id: record.id)
            ids.append(record.id)
        }
        try store.compact()
        let compactions = store.compactionCount

        // Then every key is still known, and further changes do not compact again and again
        #expect(ids.indices.allSatisfy { store.records(withIdempotencyKey: "key-\($0)") == [ids[$0]] })
        for index in 1_000..<1_020 {
            let record = try makeRecord(index: index)
            try store.add(record)
            try store.removePending(id: record.id)
        }
        try await Task.sleep(for: .milliseconds(200))
        #expect(store.compactionCount <= compactions + 1)
        print("remembered keys only: \(compactions) compactions for 1,000 lifecycles, \(store.compactionCount - compactions) after")
    }

    @Test func aDamagedRetireFrameIsQuarantinedAndTheOtherRecordsKept() throws {
        // Given a journal whose one retire frame has a body that does not read as one
        let directory = try TemporaryDirectory()
        let clock = Clock()
        var store = try JournalStore(directory: directory.store, configuration: configuration(clock))
        let other = try makeRecord(index: 1)
        try store.add(other)
        try store.append(JournalFrame(kind: .retire, body: Data("not a retire body".utf8)), flushes: true, check: { _ in }) { _, _, _, _ in }
        store.close()

        // When it is opened again
        store = try JournalStore(directory: directory.store, configuration: configuration(clock))
        defer { store.close() }

        // Then the frame is quarantined with a clear reason, and the other record is kept
        #expect(store.openReport.quarantined.count == 1)
        #expect(store.openReport.quarantined.first?.reason.contains("not a retired idempotency key") == true)
        #expect(try store.loadPending().records.map(\.id) == [other.id])
    }

    @Test func aRetireBodyReadsBackExactlyWhateverTheKey() {
        for key in ["k", "with spaces  inside ", "ünïcödé 🔑", String(repeating: "x", count: 1_024)] {
            let retired = RetiredKey(id: UUID(), sequence: .max, rememberedUntil: Date(timeIntervalSinceReferenceDate: 123.456789), key: key)
            #expect(RetiredKey(body: retired.body) == retired)
        }
        #expect(RetiredKey(body: Data("0 1 2".utf8)) == nil)
        #expect(RetiredKey(body: Data("\(UUID().uuidString) 1 nan k".utf8)) == nil)
    }

    @Test func theIndexReadsAKeyDirectlyOrByTheFullDecodeAlike() throws {
        // Given records with an ASCII key, a key the direct read leaves to the full decode, and none
        for key in ["order-42", "ünïcödé", nil] as [String?] {
            var record = try makeRecord(index: 1)
            record.idempotencyKey = key
            let body = try RecordFormat.encode(record, maximumSize: 1 << 20, formatVersion: record.journalFormatVersion)
            // Then the index fields carry the key either way, and the record reads back equal
            let direct = RecordFormat.indexFields(of: body)
            let decoded = try RecordFormat.decode(body, maximumSize: 1 << 20)
            #expect(decoded == record)
            if let direct { #expect(direct.idempotencyKey == key) }
            #expect(key == nil || key!.allSatisfy(\.isASCII) ? direct != nil : direct == nil)
            #expect(RecordFormat.IndexFields(decoded, id: try #require(UUID(uuidString: record.id))).idempotencyKey == key)
        }
    }
}
