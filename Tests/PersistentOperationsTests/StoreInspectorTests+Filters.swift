import Foundation
import Testing
@testable import PersistentOperations

/// `list --type / --tag / --state`, with and without pages, `failed --type / --tag`, and
/// `failed --json --payload`.
extension StoreInspectorTests {
    static let upload = "com.example.upload"
    static let resize = "com.example.resize"
    /// A date no test reaches: a not-before or next-attempt date still to come.
    static let future = Date(timeIntervalSinceReferenceDate: 3_000_000_000)

    /// A store no process holds, with a pending record in each state a filter selects, of two
    /// types, and two failed records (one whose payload is not a property list).
    struct FilterStore {
        let directory: TemporaryDirectory
        var path: String { directory.store.path }
        /// queued, tagged photos.
        let due: OperationRecord
        /// queued, with an attempt in flight (interrupted: no process holds the store).
        let interrupted: OperationRecord
        /// A resize waiting for its not-before date.
        let scheduled: OperationRecord
        /// Waiting for its next attempt.
        let retrying: OperationRecord
        /// Waiting for `due`, its prerequisite.
        let dependent: OperationRecord
        /// A resize, the first of its lane: due.
        let laneFirst: OperationRecord
        /// A resize behind `laneFirst` in its lane, with a not-before date still to come too.
        let laneSecond: OperationRecord
        let failedUpload: OperationRecord
        let failedResize: OperationRecord

        init() throws {
            directory = try TemporaryDirectory()
            func record(_ index: Int, _ type: String, tags: [String]) throws -> OperationRecord {
                var record = try makeRecord(index: index)
                record.typeIdentifier = type
                record.tags = tags
                return record
            }
            due = try record(1, StoreInspectorTests.upload, tags: ["photos"])
            interrupted = try record(2, StoreInspectorTests.upload, tags: ["photos", "wifi-only"])
            var scheduled = try record(3, StoreInspectorTests.resize, tags: ["photos"])
            scheduled.notBefore = StoreInspectorTests.future
            var retrying = try record(4, StoreInspectorTests.upload, tags: ["wifi-only"])
            retrying.numberOfRetries = 1
            retrying.nextAttemptAt = StoreInspectorTests.future
            var dependent = try record(5, StoreInspectorTests.upload, tags: ["photos", "wifi-only"])
            dependent.prerequisites = [due.id]
            var laneFirst = try record(6, StoreInspectorTests.resize, tags: [])
            laneFirst.lane = "album:1"
            var laneSecond = try record(7, StoreInspectorTests.resize, tags: [])
            laneSecond.lane = "album:1"
            laneSecond.notBefore = StoreInspectorTests.future
            var failedUpload = try record(8, StoreInspectorTests.upload, tags: ["photos"])
            var failedResize = try record(9, StoreInspectorTests.resize, tags: [])
            failedResize.payload = Data("bplist00 but not really".utf8)
            (self.scheduled, self.retrying, self.dependent, self.laneFirst, self.laneSecond) = (scheduled, retrying, dependent, laneFirst, laneSecond)

            let store = try RecordStore(directory: directory.store)
            for pending in [due, interrupted, scheduled, retrying, dependent, laneFirst, laneSecond, failedUpload, failedResize] {
                try store.add(pending)
            }
            try store.setAttemptsInFlight(1, forRecord: interrupted.id)
            failedUpload = try store.moveToFailed(failedUpload, reason: "403 upload refused")
            failedResize = try store.moveToFailed(failedResize, reason: "the image is too large")
            store.close()
            (self.failedUpload, self.failedResize) = (failedUpload, failedResize)
        }
    }

    static func inspect(arguments: [String]) async throws -> ProcessResult {
        try await onDedicatedThread { try ChildApp.run("store-inspector", arguments) }
    }

    /// The identifiers of the records under `key` (`pending` or `failed`) of a JSON output.
    static func ids(_ result: ProcessResult, _ key: String = "pending") throws -> [String] {
        #expect(result.status == 0, "\(result.error)")
        return try #require(try result.json()[key] as? [[String: Any]]).compactMap { $0["id"] as? String }
    }

    @Test func listFiltersSelectRecordsByTypeByEveryTagGivenAndByState() async throws {
        // Given a store with a pending record in each state, of two types, with tags
        let sample = try FilterStore()
        let before = try StoreInspectorTests.snapshot(of: sample.path)
        func list(_ filter: String...) async throws -> [String] {
            try Self.ids(try await Self.inspect(arguments: ["list", sample.path, "--json"] + filter))
        }

        // When list runs with each filter, and with filters combined, then each lists exactly
        // the records that match, in run order
        #expect(try await list("--state", "due") == [sample.due.id, sample.interrupted.id, sample.laneFirst.id])
        #expect(try await list("--state", "scheduled") == [sample.scheduled.id, sample.retrying.id])
        #expect(try await list("--state", "blocked") == [sample.dependent.id, sample.laneSecond.id])
        #expect(try await list("--state", "in-flight") == [sample.interrupted.id])
        #expect(try await list("--type", Self.resize) == [sample.scheduled.id, sample.laneFirst.id, sample.laneSecond.id])
        #expect(try await list("--tag", "photos") == [sample.due.id, sample.interrupted.id, sample.scheduled.id, sample.dependent.id])
        #expect(try await list("--tag", "photos", "--tag", "wifi-only") == [sample.interrupted.id, sample.dependent.id])
        #expect(try await list("--tag", "wifi-only", "--type", Self.upload, "--state", "blocked") == [sample.dependent.id])
        #expect(try await list("--tag", "photos", "--state", "scheduled", "--type", Self.upload) == [])
        #expect(try await list("--tag", "no-such-tag") == [])

        // And the table says what it matched, with each record's STATE
        let table = try await Self.inspect("list", sample.path, "--state", "blocked", "--tag", "wifi-only")
        #expect(table.status == 0, "\(table.error)")
        let lines = Self.squeezedLines(table.output)
        #expect(lines.first == "1 pending record in \(sample.path) matching --tag wifi-only --state blocked")
        #expect(lines.contains { $0.hasPrefix(sample.dependent.id + " \(Self.upload) waitingForPrerequisites") })
        #expect(!table.output.contains(sample.due.id) && !table.output.contains(sample.laneSecond.id))
        let lane = try await Self.inspect("list", sample.path, "--state", "blocked", "--type", Self.resize)
        #expect(Self.squeezedLines(lane.output).contains { $0.hasPrefix(sample.laneSecond.id + " \(Self.resize) waitingForLane") })

        // And failed filters by type and tags
        #expect(try Self.ids(try await Self.inspect("failed", sample.path, "--json", "--type", Self.resize), "failed") == [sample.failedResize.id])
        #expect(try Self.ids(try await Self.inspect("failed", sample.path, "--tag", "photos", "--json"), "failed") == [sample.failedUpload.id])
        #expect(try Self.ids(try await Self.inspect("failed", sample.path, "--json", "--tag", "photos", "--type", Self.resize), "failed") == [])
        let failedTable = try await Self.inspect("failed", sample.path, "--type", Self.upload)
        #expect(failedTable.status == 0, "\(failedTable.error)")
        #expect(Self.squeezedLines(failedTable.output).first == "1 failed record in \(sample.path) matching --type \(Self.upload)")
        #expect(failedTable.output.contains(sample.failedUpload.id) && !failedTable.output.contains(sample.failedResize.id))

        // And nothing in the store changed
        #expect(try StoreInspectorTests.snapshot(of: sample.path) == before)
    }

    @Test func inAStoreAProcessHoldsARunningRecordIsInFlightAndNotDue() async throws {
        // Given the filter store, held by this process as an app holds its store
        let sample = try FilterStore()
        let store = try RecordStore(directory: sample.directory.store)
        defer { store.close() }

        // When list selects the records in flight and those due
        let inFlight = try await Self.inspect("list", sample.path, "--state", "in-flight", "--json")
        let due = try Self.ids(try await Self.inspect("list", sample.path, "--state", "due", "--json"))

        // Then the record whose attempt is in flight is running: in flight, and no longer due
        let records = try #require(try inFlight.json()["pending"] as? [[String: Any]])
        #expect(records.map { $0["id"] as? String } == [sample.interrupted.id])
        #expect(records.first?["state"] as? String == "running")
        #expect(records.first?["attemptsInFlight"] as? Int == 1)
        #expect(due == [sample.due.id, sample.laneFirst.id])
    }

    @Test func filteredPagesTogetherListEveryMatchingRecordOnceInRunOrder() async throws {
        // Given 36 pending records of three priorities, added out of run order, of two types:
        // due, waiting for a date, for a prerequisite or for their lane, some in flight
        let directory = try TemporaryDirectory()
        let path = directory.store.path
        var records: [OperationRecord] = []
        var expectedState: [String: String] = [:]
        var inFlight: Set<String> = []
        do {
            let store = try RecordStore(directory: directory.store)
            for index in 0..<36 {
                var record = try makeRecord(index: index, sequence: UInt64(200 - index * 5), priority: [0, 4, -4][index % 3])
                record.typeIdentifier = index.isMultiple(of: 2) ? Self.upload : Self.resize
                if index.isMultiple(of: 4) { record.tags.append("vip") }
                switch index % 6 {
                case 1: record.notBefore = Self.future
                case 2: record.nextAttemptAt = Self.future
                case 3:
                    record.lane = index % 4 == 3 ? "lane-a" : "lane-b"
                    if index % 12 == 3 { record.notBefore = Self.future }
                case 4: record.prerequisites = [index == 34 ? UUID().uuidString : records[index - 4].id]   // 34's is not pending
                case 5 where index == 11: record.nextAttemptAt = Self.future
                default: break
                }
                try store.add(record)
                if index % 6 == 5 {
                    try store.setAttemptsInFlight(1, forRecord: record.id)
                    inFlight.insert(record.id)
                }
                records.append(record)
            }
            store.close()
        }
        // (each lane's first is its record of the lowest enqueue sequence: the last one added)
        let laneFirsts = Set(Dictionary(grouping: records.filter { $0.lane != nil }, by: { $0.lane! }).values.map { $0.min { $0.enqueueSequence < $1.enqueueSequence }!.id })
        for record in records {
            let isBlocked = record.prerequisites.contains { prerequisite in records.contains { $0.id == prerequisite } }
                || (record.lane != nil && !laneFirsts.contains(record.id))
            expectedState[record.id] = isBlocked ? "blocked" : record.dueDate.map { $0 > Date() } == true ? "scheduled" : "due"
        }
        let runOrder = records.sorted(by: OperationRecord.runsBefore)
        func expectedIDs(_ isIncluded: (OperationRecord) -> Bool) -> [String] {
            runOrder.filter(isIncluded).map(\.id)
        }
        let cases: [(filter: [String], expected: [String])] = [
            (["--state", "due"], expectedIDs { expectedState[$0.id] == "due" }),
            (["--state", "blocked"], expectedIDs { expectedState[$0.id] == "blocked" }),
            (["--state", "scheduled", "--type", Self.resize], expectedIDs { expectedState[$0.id] == "scheduled" && $0.typeIdentifier == Self.resize }),
            (["--state", "in-flight"], expectedIDs { inFlight.contains($0.id) }),
            (["--type", Self.upload, "--tag", "batch-1"], expectedIDs { $0.typeIdentifier == Self.upload && $0.tags.contains("batch-1") }),
            (["--tag", "vip", "--tag", "batch-0", "--state", "due"], expectedIDs { $0.tags.contains("vip") && $0.tags.contains("batch-0") && expectedState[$0.id] == "due" }),
        ]

        for (filter, expected) in cases {
            // When each filter lists the store whole, and in pages of 4, each after the last
            // record of the one before
            let whole = try Self.ids(try await Self.inspect(arguments: ["list", path, "--json"] + filter))
            var pages: [[String]] = []
            var after: [String] = []
            repeat {
                pages.append(try Self.ids(try await Self.inspect(arguments: ["list", path, "--limit", "4", "--json"] + after + filter)))
                after = ["--after", pages.last!.last ?? ""]
            } while pages.last!.count == 4

            // Then the whole list holds the records that match, in run order, and the pages
            // together hold the same, each once: every page full but the last
            #expect(!expected.isEmpty, "\(filter)")
            #expect(whole == expected, "\(filter)")
            #expect(pages.flatMap { $0 } == expected, "\(filter)")
            #expect(Set(pages.flatMap { $0 }).count == expected.count, "\(filter)")
            #expect(pages.dropLast().allSatisfy { $0.count == 4 } && pages.last!.count < 4, "\(filter)")
        }
        // (the cases cover several pages, and a last page left empty by a full one before it)
        #expect(cases.contains { $0.expected.count > 8 } && cases.contains { $0.expected.count.isMultiple(of: 4) })

        // And a page may start after a record the filter does not match
        let cursor = try #require(runOrder.first { expectedState[$0.id] == "due" })
        let afterDue = try Self.ids(try await Self.inspect("list", path, "--state", "blocked", "--limit", "100", "--after", cursor.id, "--json"))
        #expect(afterDue == runOrder.drop { $0.id != cursor.id }.dropFirst().filter { expectedState[$0.id] == "blocked" }.map(\.id))
        // And the text of a full page names the next page with its filters
        let text = try await Self.inspect("list", path, "--limit", "4", "--state", "blocked", "--type", Self.upload)
        let blockedUploads = expectedIDs { expectedState[$0.id] == "blocked" && $0.typeIdentifier == Self.upload }
        #expect(text.status == 0, "\(text.error)")
        #expect(text.output.contains("4 pending records in \(path) matching --type \(Self.upload) --state blocked, at most 4"))
        #expect(text.output.contains("next page: store-inspector list \(path) --limit 4 --after \(blockedUploads[3]) --type \(Self.upload) --state blocked"))
    }

    @Test func aBadFilterOrPayloadOptionIsAUsageError() async throws {
        // Given a store
        let sample = try FilterStore()

        // When filters are misspelt, lack their value, repeat what cannot repeat, or are given
        // to commands they do not apply to
        let cases: [(arguments: [String], message: String)] = [
            (["list", sample.path, "--state", "sleeping"], "unknown state sleeping for --state: use due, scheduled, blocked or in-flight"),
            (["list", sample.path, "--state", "Due"], "unknown state Due for --state"),
            (["list", sample.path, "--state"], "--state needs a state: due, scheduled, blocked or in-flight"),
            (["list", sample.path, "--state", "due", "--state", "blocked"], "--state is given once"),
            (["list", sample.path, "--type"], "--type needs a type identifier"),
            (["list", sample.path, "--type", "--json"], "--type needs a type identifier"),
            (["list", sample.path, "--type", Self.upload, "--type", Self.resize], "--type is given once"),
            (["list", sample.path, "--tag"], "--tag needs a tag"),
            (["failed", sample.path, "--state", "due"], "--state is an option of list"),
            (["stats", sample.path, "--type", Self.upload], "--type and --tag are options of list and failed"),
            (["show", sample.path, sample.due.id, "--tag", "photos"], "--type and --tag are options of list and failed"),
            (["failed", sample.path, "--payload"], "failed --payload needs --json"),
            (["list", sample.path, "--json", "--payload"], "--payload applies to export, and to failed --json"),
        ]
        for (arguments, message) in cases {
            let result = try await Self.inspect(arguments: arguments)
            // Then each exits with status 2 and says what is wrong, before the usage text
            #expect(result.status == 2, "\(arguments)")
            #expect(result.error.contains(message), "\(arguments): \(result.error)")
            #expect(result.error.contains("usage: store-inspector"), "\(arguments)")
            #expect(result.output.isEmpty, "\(arguments)")
        }
    }

    @Test func failedJSONWithPayloadAddsEachPayloadAsShowPresentsItAndWithoutIsUnchanged() async throws {
        // Given a store with a failed record whose payload is a property list, and one whose is not
        let sample = try FilterStore()

        // When failed lists them in JSON, with and without their payloads, and show presents one
        let plain = try await Self.inspect("failed", sample.path, "--json")
        let withPayload = try await Self.inspect("failed", sample.path, "--json", "--payload")
        let resizes = try await Self.inspect("failed", sample.path, "--payload", "--type", Self.resize, "--json")
        let shown = try await Self.inspect("show", sample.path, sample.failedUpload.id, "--json")
        for result in [plain, withPayload, resizes, shown] {
            #expect(result.status == 0, "\(result.error)")
        }

        // Then without --payload each record has the keys it always had, and no payload
        let plainRecords = try #require(try plain.json()["failed"] as? [[String: Any]])
        #expect(plainRecords.map { $0["id"] as? String } == [sample.failedUpload.id, sample.failedResize.id])
        let keys = [
            "id", "typeIdentifier", "state", "priority", "retries", "attempts", "attemptsInFlight", "nextAttempt", "tags",
            "uniqueKey", "failureReason", "prerequisites", "expiresAt", "conditions", "repeatEvery", "flex", "periodTarget",
            "completedPeriods", "due", "lane", "holdsLaneOnFailure", "isHoldingLane",
        ]
        for record in plainRecords {
            #expect(Set(record.keys) == Set(keys))
        }
        // (in that order, the last of each record's members being isHoldingLane)
        let memberLines = plain.output.split(separator: "\n").filter { $0.hasPrefix("      \"") }
        #expect(memberLines.map { $0.split(separator: "\"")[1] } == (keys + keys).map { Substring($0) })
        // And with --payload each record has the same fields, followed by its payload as show presents it
        let records = try #require(try withPayload.json()["failed"] as? [[String: Any]])
        #expect(records.count == 2)
        for (record, plainRecord) in zip(records, plainRecords) {
            var fields = record
            fields["payload"] = nil
            #expect(NSDictionary(dictionary: fields) == NSDictionary(dictionary: plainRecord))
        }
        let payload = try #require(records[0]["payload"] as? [String: Any])
        let shownPayload = try #require(try shown.json()["payload"] as? [String: Any])
        #expect(NSDictionary(dictionary: payload) == NSDictionary(dictionary: shownPayload))
        #expect(payload["url"] as? String == SamplePayload.example.url)
        #expect(payload["attempt"] as? Int == 8)
        #expect(payload["body"] as? String == "base64:" + SamplePayload.example.body.base64EncodedString())
        // And a payload that is not a property list is reported, not decoded
        let unreadable = try #require(records[1]["payload"] as? [String: Any])
        #expect((unreadable["unreadable"] as? String)?.contains("not a valid property list") == true)
        // And --payload combines with the filters
        let resizeRecords = try #require(try resizes.json()["failed"] as? [[String: Any]])
        #expect(resizeRecords.map { $0["id"] as? String } == [sample.failedResize.id])
        #expect(resizeRecords.first?["payload"] is [String: Any])
        #expect(withPayload.output.split(separator: "\n").contains { $0.hasPrefix("      \"payload\": {") })
    }
}
