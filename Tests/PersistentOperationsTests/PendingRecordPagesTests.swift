import Foundation
import Testing
@testable import PersistentOperations

/// `ReadOnlyPersistentStore.pendingRecords(after:limit:)` and `store-inspector list --limit`.
@Suite("Read-only store: pages of pending records", .timeLimit(.minutes(2)))
struct PendingRecordPagesTests {
    /// 25 pending records of three priorities, out of run order on disk, one depending on
    /// another, four in one lane (the last added is its first: the lowest enqueue sequence),
    /// one of them running.
    private static func fill(_ store: RecordStore) throws -> [OperationRecord] {
        var records: [OperationRecord] = []
        for index in 0..<25 {
            var record = try makeRecord(index: index, sequence: UInt64(100 - index * 3), priority: [0, 4, -4][index % 3])
            if index == 7 { record.prerequisites = [records[4].id] }
            if [10, 14, 18, 22].contains(index) { record.lane = "chat:1" }
            records.append(record)
            try store.add(record)
        }
        try store.setAttemptsInFlight(1, forRecord: records[9].id)
        return records
    }

    @Test(arguments: [RecordStore.Engine.journal, .files])
    func pagesTogetherListWhatPendingRecordsListsInTheSameOrder(engine: RecordStore.Engine) throws {
        // Given a store of 25 pending records
        let directory = try TemporaryDirectory()
        let store = try RecordStore(directory: directory.store, configuration: .init(engine: engine))
        defer { store.close() }
        _ = try Self.fill(store)
        let view = try ReadOnlyPersistentStore(directory: directory.store)
        let whole = try view.pendingRecords().records

        // When it is read in pages of 7, each after the last record of the one before
        var pages: [[StoredOperationRecord]] = []
        var page = try view.pendingRecords(after: nil, limit: 7)
        while !page.records.isEmpty {
            pages.append(page.records)
            page = try view.pendingRecords(after: page.records.last, limit: 7)
        }

        // Then the pages hold 7, 7, 7 and 4 records, and together the very records, states and
        // dependents of the whole list, in its order
        #expect(pages.map(\.count) == [7, 7, 7, 4])
        #expect(pages.flatMap { $0 } == whole)
        #expect(whole.contains { $0.state == .waitingForPrerequisites } && whole.contains { !$0.dependents.isEmpty })
        #expect(whole.filter { $0.state == .waitingForLane }.count == 3)
        #expect(whole.contains { $0.state == .running })   // (this process holds the store)
    }

    @Test(arguments: [RecordStore.Engine.journal, .files])
    func filteredPagesTogetherListTheRecordsOfTheWholeListThatTheFilterAccepts(engine: RecordStore.Engine) throws {
        // Given a store of 25 pending records, some waiting for a prerequisite or for their lane
        let directory = try TemporaryDirectory()
        let store = try RecordStore(directory: directory.store, configuration: .init(engine: engine))
        defer { store.close() }
        _ = try Self.fill(store)
        let view = try ReadOnlyPersistentStore(directory: directory.store)
        let whole = try view.pendingRecords().records
        let filters: [(name: String, isIncluded: (StoredOperationRecord) -> Bool)] = [
            ("queued", { $0.state == .queued }),
            ("waiting", { $0.state == .waitingForLane || $0.state == .waitingForPrerequisites }),
            ("lane", { $0.lane != nil }),
            ("batch-1", { $0.tags.contains("batch-1") }),
        ]
        for (name, isIncluded) in filters {
            // When each filter reads it in pages of 3, each after the last record of the one before
            var pages: [[StoredOperationRecord]] = []
            var page = try view.pendingRecords(after: nil, limit: 3, where: isIncluded)
            while !page.records.isEmpty {
                pages.append(page.records)
                page = try view.pendingRecords(after: page.records.last, limit: 3, where: isIncluded)
            }

            // Then every page but the last is full, and together they hold the records of the
            // whole list that the filter accepts, each once, in its order, states and dependents included
            let expected = whole.filter(isIncluded)
            #expect(expected.count >= 4, "\(name)")
            #expect(pages.dropLast().allSatisfy { $0.count == 3 }, "\(name)")
            #expect(pages.flatMap { $0 } == expected, "\(name)")
        }
        // And a cursor the filter does not accept still marks a place in run order
        let cursor = try #require(whole.first { $0.state == .queued && $0.lane == nil })
        let after = try view.pendingRecords(after: cursor, limit: 100) { $0.lane != nil }.records
        let position = try #require(whole.firstIndex(of: cursor))
        #expect(after == whole[(position + 1)...].filter { $0.lane != nil })
    }

    @Test func aPageAfterChangesShowsWhatIsLeftAfterTheCursorAndNewRecordsInTheirPlace() throws {
        // Given a journal store and the first page of 5
        let directory = try TemporaryDirectory()
        let store = try RecordStore(directory: directory.store)
        defer { store.close() }
        let records = try Self.fill(store)
        let view = try ReadOnlyPersistentStore(directory: directory.store)
        let first = try view.pendingRecords(after: nil, limit: 5).records
        let rest = try view.pendingRecords().records.dropFirst(5)

        // When the record right after the page runs, and one is added at the highest priority
        // and one at the lowest
        try store.removePending(id: try #require(rest.first).id.rawValue)
        var high = try makeRecord(index: 30, sequence: 500, priority: 8)
        high.tags = ["late"]
        let low = try makeRecord(index: 31, sequence: 501, priority: -8)
        try store.add(high)
        try store.add(low)

        // Then the next page starts with the record after the one that ran; the late record of
        // the highest priority sorts before the cursor (it would be on the first page now), the
        // lowest after every other
        let next = try view.pendingRecords(after: first.last, limit: 100).records
        #expect(next.map(\.id) == rest.dropFirst().map(\.id) + [PersistentOperationID(record: low.id)])
        #expect(!next.contains { $0.id.rawValue == high.id })
        #expect(records.count == 25)
    }

    @Test func theInspectorListsAPageAndNamesTheNextOne() async throws {
        // Given a store of 25 pending records
        let directory = try TemporaryDirectory()
        let store = try RecordStore(directory: directory.store)
        _ = try Self.fill(store)
        store.close()
        let whole = try ReadOnlyPersistentStore(directory: directory.store).pendingRecords().records.map(\.id.rawValue)
        let path = directory.store.path

        // When the inspector lists the first page of 10, then the page after its last record
        let first = try await StoreInspectorTests.inspect("list", path, "--limit", "10", "--json")
        let firstText = try await StoreInspectorTests.inspect("list", path, "--limit", "10")
        let second = try await StoreInspectorTests.inspect("list", path, "--limit", "10", "--after", whole[9].lowercased(), "--json")
        let third = try await StoreInspectorTests.inspect("list", path, "--limit", "10", "--after", whole[19])

        // Then each page holds the next records in run order, and the text names the next page
        let firstIDs = try #require(try first.json()["pending"] as? [[String: Any]]).map { $0["id"] as? String }
        let secondIDs = try #require(try second.json()["pending"] as? [[String: Any]]).map { $0["id"] as? String }
        #expect(firstIDs == whole[0..<10].map(Optional.init))
        #expect(secondIDs == whole[10..<20].map(Optional.init))
        #expect(firstText.output.contains("next page: store-inspector list \(path) --limit 10 --after \(whole[9])"))
        #expect(third.output.contains("5 pending records") && !third.output.contains("next page"))

        // And a cursor that is not pending, --after without --limit, and --limit on another
        // command are clear errors
        let gone = try await StoreInspectorTests.inspect("list", path, "--limit", "10", "--after", UUID().uuidString)
        let noLimit = try await StoreInspectorTests.inspect("list", path, "--after", whole[0])
        let elsewhere = try await StoreInspectorTests.inspect("stats", path, "--limit", "3")
        let zero = try await StoreInspectorTests.inspect("list", path, "--limit", "0")
        #expect(gone.status == 1 && gone.error.contains("no pending record has the identifier"))
        #expect(noLimit.status == 2 && noLimit.error.contains("--after needs --limit"))
        #expect(elsewhere.status == 2 && elsewhere.error.contains("options of list"))
        #expect(zero.status == 2)
    }
}
