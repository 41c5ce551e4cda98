import Foundation
import Testing
@testable import PersistentOperations

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The `store-inspector` executable, run end to end on real store directories.
@Suite("Store inspector", .timeLimit(.minutes(3)), .serialized)
struct StoreInspectorTests {
    static let corruptName = "00000000-0000-4000-8000-000000000001.record"

    /// A store with two pending records (one with a payload that is not a property list), one
    /// failed record, and a corrupt file in the pending area.
    struct SampleStore {
        let directory: TemporaryDirectory
        var path: String { directory.store.path }
        let first: OperationRecord
        let second: OperationRecord
        let failed: OperationRecord

        init() throws {
            directory = try TemporaryDirectory()
            let store = try RecordStore(directory: directory.store)
            var first = try makeRecord(index: 1, priority: 5)
            first.tags = ["photos", "wifi-only"]
            first.uniqueKey = "upload-1"
            first.numberOfRetries = 2
            first.numberOfAttempts = 3
            first.nextAttemptAt = Date(timeIntervalSinceReferenceDate: 800_000_000.25)
            first.expiresAt = Date(timeIntervalSinceReferenceDate: 800_086_400.5)
            var second = try makeRecord(index: 2)
            second.typeIdentifier = "com.example.unregistered"
            second.payload = Data("bplist00 but not really".utf8)
            var failed = try makeRecord(index: 3)
            try store.add(first)
            try store.add(second)
            try store.add(failed)
            failed = try store.moveToFailed(failed, reason: "403 upload refused")
            store.close()
            // (a file of the earlier layout, which a read-only reader reports and leaves in place)
            try FileManager.default.createDirectory(at: directory.store.appendingPathComponent("pending"), withIntermediateDirectories: true)
            try Data("not a record at all".utf8).write(to: directory.store.appendingPathComponent("pending/\(StoreInspectorTests.corruptName)"))
            (self.first, self.second, self.failed) = (first, second, failed)
        }

        /// Every file under the store with its contents, to prove reading changed nothing.
        func snapshot() throws -> [String: Data] {
            try StoreInspectorTests.snapshot(of: path)
        }
    }

    /// Every file under the directory at `path` with its contents.
    static func snapshot(of path: String) throws -> [String: Data] {
        var files: [String: Data] = [:]
        let enumerator = FileManager.default.enumerator(atPath: path)
        while let name = enumerator?.nextObject() as? String {
            let full = path + "/" + name
            var isDirectory: ObjCBool = false
            if FileManager.default.fileExists(atPath: full, isDirectory: &isDirectory), !isDirectory.boolValue {
                files[name] = try Data(contentsOf: URL(fileURLWithPath: full))
            }
        }
        return files
    }

    static func inspect(_ arguments: String...) async throws -> ProcessResult {
        try await onDedicatedThread { try ChildApp.run("store-inspector", arguments) }
    }

    /// Runs the inspector with `directory` as its current directory.
    static func inspect(in directory: URL, _ arguments: String...) async throws -> ProcessResult {
        try await onDedicatedThread { try ChildApp.run("store-inspector", arguments, currentDirectory: directory) }
    }

    /// The pending or failed record `id` as the store at `path` holds it, read without changing anything.
    static func storedRecord(_ id: String, in path: String) throws -> OperationRecord? {
        let reader = try RecordStore(directory: URL(fileURLWithPath: path), access: .readOnly)
        return try (reader.loadPending().records + reader.loadFailed().records).first { $0.id == id }
    }

    /// An empty directory beside the store, to export into.
    static func exportDirectory(beside sample: SampleStore) throws -> URL {
        let url = sample.directory.url.appendingPathComponent("exports", isDirectory: true)
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }

    /// Output lines with runs of spaces made one, for comparing aligned text.
    static func squeezedLines(_ output: String) -> [String] {
        output.split(separator: "\n").map { $0.split(separator: " ", omittingEmptySubsequences: true).joined(separator: " ") }
    }

    @Test func readingCommandsListShowAndCountRecordsAndReportACorruptFileWithoutChangingTheStore() async throws {
        // Given a store with pending and failed records and a corrupt file
        let sample = try SampleStore()
        let before = try sample.snapshot()

        // When list, failed and stats run, in JSON and as tables
        let list = try await Self.inspect("list", sample.path, "--json")
        let table = try await Self.inspect("list", "--store", sample.path)
        let failed = try await Self.inspect("failed", sample.path, "--json")
        let stats = try await Self.inspect("stats", sample.path, "--json")
        let statsTable = try await Self.inspect("stats", sample.path)

        // Then each succeeds and shows the records in run order with their fields
        for result in [list, table, failed, stats, statsTable] {
            #expect(result.status == 0, "\(result.error)")
        }
        let pending = try #require(try list.json()["pending"] as? [[String: Any]])
        #expect(pending.map { $0["id"] as? String } == [sample.first.id, sample.second.id])
        #expect(pending[0]["typeIdentifier"] as? String == "com.example.upload")   // the API's name
        #expect(pending[0]["type"] == nil)
        #expect(pending[0]["priority"] as? Int == 5)
        #expect(pending[0]["retries"] as? Int == 2)
        #expect(pending[0]["attempts"] as? Int == 3)
        #expect(pending[0]["tags"] as? [String] == ["photos", "wifi-only"])
        #expect(pending[0]["uniqueKey"] as? String == "upload-1")
        #expect(pending[0]["nextAttempt"] as? String == "2026-05-09T06:13:20.250Z")
        #expect(pending[1]["uniqueKey"] is NSNull)
        let unreadable = try #require(try list.json()["unreadable"] as? [[String: Any]])
        #expect(unreadable.map { $0["name"] as? String } == [Self.corruptName])
        #expect(table.output.contains("UNIQUE KEY"))
        #expect(table.output.contains(sample.first.id) && table.output.contains("photos,wifi-only"))
        #expect(table.output.contains(Self.corruptName))

        let failedRecords = try #require(try failed.json()["failed"] as? [[String: Any]])
        #expect(failedRecords.map { $0["id"] as? String } == [sample.failed.id])
        #expect(failedRecords.first?["failureReason"] as? String == "403 upload refused")

        let counts = try stats.json()
        #expect(counts["pending"] as? Int == 2)
        #expect(counts["failed"] as? Int == 1)
        #expect(counts["pendingByType"] as? [String: Int] == ["com.example.upload": 1, "com.example.unregistered": 1])
        #expect((counts["unreadable"] as? [Any])?.count == 1)
        #expect(counts["quarantined"] as? Int == 0)
        #expect(statsTable.output.contains("pending") && statsTable.output.contains("com.example.unregistered 1"))

        // And nothing in the store changed: the corrupt file was reported, not quarantined
        #expect(try sample.snapshot() == before)
    }

    @Test func statsCountTheAddsWaitingInTheInboxAndThoseSetAside() async throws {
        // Given a store whose inbox holds two adds from an extension and a letter set aside
        let sample = try SampleStore()
        let inbox = PersistentOperationInbox(directory: URL(fileURLWithPath: sample.path), producer: "share-extension")
        for name in ["a", "b"] {
            try inbox.addOperation(PlainNote(payload: UploadPayload(name: name, journal: UUID().uuidString)))
        }
        let storeInbox = StoreInbox(directory: URL(fileURLWithPath: sample.path))
        try Data("not a letter".utf8).write(to: URL(fileURLWithPath: storeInbox.path + "/0000000000000001-BAD.rejected"))

        // When stats run, in JSON and as a table
        let stats = try await Self.inspect("stats", sample.path, "--json")
        let table = try await Self.inspect("stats", sample.path)

        // Then both say how many wait for the app's queue, and name the one set aside
        #expect(stats.status == 0 && table.status == 0, "\(stats.error)")
        #expect(try stats.json()["inboxWaiting"] as? Int == 2)
        #expect(try stats.json()["inboxRejected"] as? [String] == ["0000000000000001-BAD"])
        #expect(table.output.contains("inbox") && table.output.contains("waiting for the app's queue"))
        #expect(table.output.contains("0000000000000001-BAD.rejected"))
        // And nothing was taken in
        #expect(inbox.waitingCount == 2)
    }

    @Test func aStoreReachedThroughASymbolicLinkIsInspectedAsTheDirectoryItNames() async throws {
        let sample = try SampleStore()
        let link = sample.directory.url.appendingPathComponent("link").path
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: sample.path)
        let list = try await Self.inspect("list", link, "--json")
        #expect(list.status == 0, "\(list.error)")
        let pending = try #require(try list.json()["pending"] as? [[String: Any]])
        #expect(pending.map { $0["id"] as? String } == [sample.first.id, sample.second.id])
    }

    @Test func showPrintsEveryFieldAndThePayloadDecodedOnlyAfterVerification() async throws {
        // Given a store with a readable payload and one that is not a property list
        let sample = try SampleStore()

        // When show runs on each
        let shown = try await Self.inspect("show", sample.path, sample.first.id, "--json")
        let garbage = try await Self.inspect("show", sample.path, sample.second.id, "--json")
        let text = try await Self.inspect("show", sample.path, sample.failed.id)
        let corrupt = try await Self.inspect("show", sample.path, String(Self.corruptName.prefix(36)))
        let missing = try await Self.inspect("show", sample.path, UUID().uuidString)

        // Then the payload's fields appear as generic values
        #expect(shown.status == 0, "\(shown.error)")
        let record = try shown.json()
        #expect(record["area"] as? String == "pending")
        #expect(record["enqueueSequence"] as? Int == 2)
        #expect(record["expiresAt"] as? String == "2026-05-10T06:13:20.500Z")
        #expect(record["formatVersion"] as? Int == 5)   // the journal's
        #expect(record["typeIdentifier"] as? String == "com.example.upload")
        #expect(record["type"] == nil)
        let payload = try #require(record["payload"] as? [String: Any])
        #expect(payload["url"] as? String == SamplePayload.example.url)
        #expect(payload["attempt"] as? Int == 1)
        #expect(payload["tags"] as? [String] == SamplePayload.example.tags)
        #expect(payload["body"] as? String == "base64:" + SamplePayload.example.body.base64EncodedString())
        // And a payload that fails verification is reported, not decoded
        #expect(garbage.status == 0, "\(garbage.error)")
        let unreadable = try #require(try garbage.json()["payload"] as? [String: Any])
        #expect((unreadable["unreadable"] as? String)?.contains("not a valid property list") == true)
        // And the text form shows the failed record with its reason
        #expect(text.status == 0)
        #expect(text.output.contains("area:") && text.output.contains("failed"))
        #expect(text.output.contains("failureReason:") && text.output.contains("403 upload refused"))
        // And a corrupt or unknown record is a clear error, not a crash
        #expect(corrupt.status == 1)
        #expect(corrupt.error.contains("cannot be read"))
        #expect(missing.status == 1)
        #expect(missing.error.contains("no pending or failed record"))
    }

    @Test func onAStoreAnAppHoldsReadingWorksAndChangingNamesTheHolder() async throws {
        // Given a store the crash-demo app ran to the end: one upload in six is refused
        let directory = try TemporaryDirectory()
        let effects = directory.url.appendingPathComponent("effects.txt").path
        let app = try await onDedicatedThread {
            try ChildApp.run("crash-demo", ["app", "--store", directory.store.path, "--effects", effects, "--count", "6", "--attempt-ms", "5"])
        }
        #expect(app.status == 0, "\(app.error)")
        // And another process holding it
        let pipe = Pipe()
        let holder = try ChildApp.launch(["hold", "--store", directory.store.path], output: pipe.fileHandleForWriting)
        defer {
            kill(holder.processIdentifier, SIGKILL)
            holder.waitUntilExit()
        }
        let line = try await onDedicatedThread { () -> String in
            String(decoding: pipe.fileHandleForReading.availableData, as: UTF8.self)
        }
        #expect(line.hasPrefix("holding"))

        // When the inspector reads it, and then tries to change it
        let failed = try await Self.inspect("failed", directory.store.path, "--json")
        let stats = try await Self.inspect("stats", directory.store.path, "--json")
        let retry = try await Self.inspect("retry-failed", directory.store.path, "--all", "--wait", "0.3")

        // Then reading works and shows the refused upload with its reason
        #expect(failed.status == 0, "\(failed.error)")
        let records = try #require(try failed.json()["failed"] as? [[String: Any]])
        #expect(records.map { $0["failureReason"] as? String } == ["403 upload refused"])
        #expect(records.first?["typeIdentifier"] as? String == "demo.upload")
        let id = try #require(records.first?["id"] as? String)
        let shown = try await Self.inspect("show", directory.store.path, id, "--json")
        #expect((try shown.json()["payload"] as? [String: Any])?["behaviour"] as? String == "refused")
        // And export writes the refused upload's record, as the store holds it, without the lock
        let exportedFile = directory.url.appendingPathComponent("refused.record")
        let exported = try await Self.inspect("export", directory.store.path, id, "--output", exportedFile.path)
        #expect(exported.status == 0, "\(exported.error)")
        let storedFailed = try #require(try Self.storedRecord(id, in: directory.store.path))
        #expect(try RecordFormat.decode(Data(contentsOf: exportedFile)) == storedFailed)
        #expect(try stats.json()["lockFileProcess"] as? Int == Int(holder.processIdentifier))
        #expect(try stats.json()["lockFileProcessIsRunning"] as? Bool == true)
        // And changing asks the holder, which never restores and so never answers: the command
        // fails naming the holder's process id, the record stays in place and the request waits
        #expect(retry.status == 1)
        #expect(retry.error.contains("process \(holder.processIdentifier)"))
        #expect(retry.error.contains("did not answer within 0.3 s"))
        #expect(StoreInbox(directory: directory.store).pendingRequests().count == 1)
        #expect(try RecordStore(directory: directory.store, access: .readOnly).loadFailed().records.map(\.id) == [id])
    }

    @Test func retryFailedAndPurgeChangeTheFailedArea() async throws {
        // Given a store with three failed records
        let directory = try TemporaryDirectory()
        let store = try RecordStore(directory: directory.store)
        var ids: [String] = []
        for index in 0..<3 {
            let record = try makeRecord(index: index)
            try store.add(record)
            ids.append(try store.moveToFailed(record, reason: "refused \(index)").id)
        }
        store.close()

        // When one is retried and the others are purged
        let retry = try await Self.inspect("retry-failed", directory.store.path, ids[0], "--json")
        let purgeOne = try await Self.inspect("purge", directory.store.path, ids[1])
        let purgeAll = try await Self.inspect("purge", "--store", directory.store.path, "--all", "--json")
        let purgeMissing = try await Self.inspect("purge", directory.store.path, ids[1])

        // Then the retried record is pending with a fresh budget and the failed area is empty
        #expect(retry.status == 0, "\(retry.error)")
        #expect(try retry.json()["re-queued"] as? [String] == [ids[0]])
        #expect(purgeOne.status == 0, "\(purgeOne.error)")
        #expect(purgeAll.status == 0, "\(purgeAll.error)")
        #expect(try purgeAll.json()["purged"] as? [String] == [ids[2]])
        let reader = try RecordStore(directory: directory.store, access: .readOnly)
        let pending = try reader.loadPending().records
        #expect(pending.map(\.id) == [ids[0]])
        #expect(pending.first?.failureReason == nil)
        #expect(try reader.loadFailed().records.isEmpty)
        // And purging a record that is gone is a clear error
        #expect(purgeMissing.status == 1)
        #expect(purgeMissing.error.contains("There is no failed record"))
    }

    @Test func listAndShowTellTheOperationGraph() async throws {
        // Given a stored chain album ← photo, and a failed record that failed with its prerequisite
        let directory = try TemporaryDirectory()
        let store = try RecordStore(directory: directory.store)
        let album = try makeRecord(index: 1)
        var photo = try makeRecord(index: 2)
        photo.prerequisites = [album.id]
        var orphan = try makeRecord(index: 3)
        orphan.prerequisites = [UUID().uuidString]
        try store.add(album)
        try store.add(photo)
        try store.add(orphan)
        orphan.failedPrerequisite = orphan.prerequisites[0]
        _ = try store.moveToFailed(orphan, reason: "prerequisite failed for good")
        store.close()
        // When the inspector lists and shows them
        let list = try await Self.inspect("list", directory.store.path, "--json")
        let shownPhoto = try await Self.inspect("show", directory.store.path, photo.id, "--json")
        let shownAlbum = try await Self.inspect("show", directory.store.path, album.id)
        let shownOrphan = try await Self.inspect("show", directory.store.path, orphan.id, "--json")
        let table = try await Self.inspect("list", directory.store.path)
        // Then the dependent is waiting for its prerequisite, and each side names the other
        let pending = try #require(try list.json()["pending"] as? [[String: Any]])
        let photoRow = try #require(pending.first { $0["id"] as? String == photo.id })
        #expect(photoRow["state"] as? String == "waitingForPrerequisites")
        #expect(photoRow["prerequisites"] as? [String] == [album.id])
        #expect(pending.first { $0["id"] as? String == album.id }?["state"] as? String == "queued")
        #expect(try shownPhoto.json()["prerequisites"] as? [String] == [album.id])
        #expect(shownAlbum.output.contains("dependents:") && shownAlbum.output.contains(photo.id))
        #expect(try shownOrphan.json()["failedPrerequisite"] as? String == orphan.prerequisites[0])
        #expect(table.output.contains("waitingForPrerequisites"))
    }

    @Test func listAndShowTellEachRecordsLaneAndItsPlaceInIt() async throws {
        // Given three stored records of one lane and a failed one holding another
        let directory = try TemporaryDirectory()
        let store = try RecordStore(directory: directory.store)
        var lane: [OperationRecord] = []
        for index in 1...3 {
            var record = try makeRecord(index: index)
            record.lane = "chat:1"
            try store.add(record)
            lane.append(record)
        }
        var holder = try makeRecord(index: 4)
        holder.lane = "chat:2"
        holder.laneHoldsOnFailure = true
        holder.isHoldingLane = true
        try store.add(holder)
        _ = try store.moveToFailed(holder, reason: "413 too large")
        store.close()
        // When the inspector lists and shows them
        let list = try await Self.inspect("list", directory.store.path, "--json")
        let third = try await Self.inspect("show", directory.store.path, lane[2].id, "--json")
        let first = try await Self.inspect("show", directory.store.path, lane[0].id)
        let failed = try await Self.inspect("show", directory.store.path, holder.id, "--json")
        // Then the first is due and the others wait for their turn, each with its place
        let pending = try #require(try list.json()["pending"] as? [[String: Any]])
        #expect(pending.map { $0["lane"] as? String } == ["chat:1", "chat:1", "chat:1"])
        #expect(pending.map { $0["state"] as? String } == ["queued", "waitingForLane", "waitingForLane"])
        #expect(try third.json()["lanePosition"] as? Int == 2)
        #expect(try third.json()["formatVersion"] as? Int == 6)
        #expect(Self.squeezedLines(first.output).contains("lanePosition: 0"))
        #expect(try failed.json()["isHoldingLane"] as? Bool == true)
        #expect(try failed.json()["holdsLaneOnFailure"] as? Bool == true)
    }

    @Test func requeueQuarantinedMovesReadableRecordsBackToPendingAndLeavesDamagedBytes() async throws {
        // Given a store with a record quarantined whole (its payload did not decode) and an
        // entry of damaged bytes
        let directory = try TemporaryDirectory()
        let store = try RecordStore(directory: directory.store)
        let record = try makeRecord(index: 1)
        try store.add(record)
        let name = try store.quarantinePending(id: record.id, reason: "the payload does not decode")
        store.close()
        try Data("damaged".utf8).write(to: directory.store.appendingPathComponent("quarantine/segment-3.bytes"))
        // When the inspector re-queues every quarantined record
        let result = try await Self.inspect("requeue-quarantined", directory.store.path, "--all", "--json")
        // Then the record is pending again, as it was stored, and the damaged bytes stay
        #expect(result.status == 0, "\(result.output)")
        let json = try result.json()
        #expect(json["re-queued"] as? [String] == [record.id])
        #expect((json["skipped"] as? [[String: Any]])?.first?["name"] as? String == "segment-3.bytes")
        #expect(try Self.storedRecord(record.id, in: directory.store.path) == record)
        #expect(try directory.names(in: "quarantine") == ["segment-3.bytes"])
        #expect(!name.isEmpty)
    }

    @Test func showTellsTheCrashesOnFileAndWhetherTheNextAttemptRunsAlone() async throws {
        // Given a store whose last launch crashed with one attempt in flight (its marker, and
        // the line the crash-signal handler writes), opened again, and another record not in flight
        let directory = try TemporaryDirectory()
        let store = try RecordStore(directory: directory.store)
        let crasher = try makeRecord(index: 1)
        let other = try makeRecord(index: 2)
        try store.add(crasher)
        try store.add(other)
        try store.setAttemptsInFlight(1, forRecord: crasher.id)
        try Data("witness on\ncrashed 11\n".utf8).write(to: URL(fileURLWithPath: directory.path("attempts", "launch")))
        _ = try store.beginLaunch(witness: false)
        store.close()
        // When the inspector shows them
        let shownCrasher = try await Self.inspect("show", directory.store.path, crasher.id, "--json")
        let shownOther = try await Self.inspect("show", directory.store.path, other.id, "--json")
        let text = try await Self.inspect("show", directory.store.path, crasher.id)
        // Then the crash is attributed to the one in flight, which runs alone next; not to the other
        #expect(try shownCrasher.json()["crashes"] as? Int == 1)
        #expect(try shownCrasher.json()["runsAlone"] as? Bool == true)
        #expect(try shownOther.json()["crashes"] as? Int == 0)
        #expect(try shownOther.json()["runsAlone"] as? Bool == false)
        #expect(text.output.contains("crashes:") && text.output.contains("runsAlone:"))
    }

    @Test func listShowAndStatsTellPeriodicSeriesAndWhenWorkIsDue() async throws {
        // Given a series repeating every hour (flex 10 min) that has run two periods and waits
        // for the window of the next, and a record added once with a later not-before date
        let directory = try TemporaryDirectory()
        let target = Date(timeIntervalSinceReferenceDate: 3_000_000_000)   // 2096-01-25T05:20:00Z
        var series = try makeRecord(index: 1)
        series.uniqueKey = "catalogue"
        series.repeatInterval = 3600
        series.repeatFlex = 600
        series.periodTarget = target
        series.notBefore = target.addingTimeInterval(-600)
        series.completedPeriods = 2
        var once = try makeRecord(index: 2)
        once.notBefore = target.addingTimeInterval(100.5)
        do {
            let store = try RecordStore(directory: directory.store)
            try store.add(series)
            try store.add(once)
            store.close()
        }

        // When the inspector lists, shows and counts them
        let list = try await Self.inspect("list", directory.store.path, "--json")
        let table = try await Self.inspect("list", directory.store.path)
        let shown = try await Self.inspect("show", directory.store.path, series.id, "--json")
        let shownText = try await Self.inspect("show", directory.store.path, series.id)
        let shownOnce = try await Self.inspect("show", directory.store.path, once.id, "--json")
        let stats = try await Self.inspect("stats", directory.store.path, "--json")
        let statsTable = try await Self.inspect("stats", directory.store.path)
        for result in [list, table, shown, shownText, shownOnce, stats, statsTable] {
            #expect(result.status == 0, "\(result.error)")
        }

        // Then list shows the series' schedule, target, periods and due date (its window's start),
        // besides the fields it always showed
        let pending = try #require(try list.json()["pending"] as? [[String: Any]])
        #expect(pending.map { $0["id"] as? String } == [series.id, once.id])
        #expect(pending[0]["repeatEvery"] as? Int == 3600)
        #expect(pending[0]["flex"] as? Int == 600)
        #expect(pending[0]["periodTarget"] as? String == "2096-01-25T05:20:00.000Z")
        #expect(pending[0]["completedPeriods"] as? Int == 2)
        #expect(pending[0]["due"] as? String == "2096-01-25T05:10:00.000Z")
        #expect(pending[0]["nextAttempt"] as? String == "2096-01-25T05:10:00.000Z")
        #expect(pending[0]["uniqueKey"] as? String == "catalogue")
        #expect(pending[1]["repeatEvery"] is NSNull && pending[1]["flex"] is NSNull && pending[1]["periodTarget"] is NSNull)
        #expect(pending[1]["completedPeriods"] as? Int == 0)
        #expect(pending[1]["due"] as? String == "2096-01-25T05:21:40.500Z")
        // And the table adds DUE and REPEATS after the columns it always had
        let lines = table.output.split(separator: "\n").map(String.init)
        let header = try #require(lines.first { $0.hasPrefix("ID") })
        #expect(header.split(separator: " ", omittingEmptySubsequences: true).joined(separator: " ")
            == "ID TYPE STATE PRIORITY RETRIES ATTEMPTS NEXT ATTEMPT TAGS UNIQUE KEY DUE REPEATS")
        let seriesRow = try #require(lines.first { $0.hasPrefix(series.id) })
        #expect(seriesRow.hasSuffix("catalogue   2096-01-25T05:10:00.000Z  every 3600 s, flex 600 s"))
        let onceRow = try #require(lines.first { $0.hasPrefix(once.id) })
        #expect(onceRow.hasSuffix("2096-01-25T05:21:40.500Z  -"))

        // And show tells every periodic field, in JSON and in text
        let details = try shown.json()
        #expect(details["repeatEvery"] as? Int == 3600)
        #expect(details["flex"] as? Int == 600)
        #expect(details["periodTarget"] as? String == "2096-01-25T05:20:00.000Z")
        #expect(details["completedPeriods"] as? Int == 2)
        #expect(details["due"] as? String == "2096-01-25T05:10:00.000Z")
        #expect(details["notBefore"] as? String == "2096-01-25T05:10:00.000Z")
        #expect(details["formatVersion"] as? Int == 5)
        #expect(details["payloadBytes"] as? Int == series.payload.count)
        let textLines = shownText.output.split(separator: "\n").map { $0.split(separator: " ", omittingEmptySubsequences: true).joined(separator: " ") }
        #expect(textLines.contains("repeatEvery: 3600"))
        #expect(textLines.contains("flex: 600"))
        #expect(textLines.contains("periodTarget: 2096-01-25T05:20:00.000Z"))
        #expect(textLines.contains("completedPeriods: 2"))
        #expect(textLines.contains("due: 2096-01-25T05:10:00.000Z"))
        let onceDetails = try shownOnce.json()
        #expect(onceDetails["repeatEvery"] is NSNull && onceDetails["periodTarget"] is NSNull)
        #expect(onceDetails["completedPeriods"] as? Int == 0)
        #expect(onceDetails["due"] as? String == "2096-01-25T05:21:40.500Z")

        // And stats counts the series and names the next due date, the series' window start
        let counts = try stats.json()
        #expect(counts["pending"] as? Int == 2)
        #expect(counts["periodic"] as? Int == 1)
        #expect(counts["periodicByType"] as? [String: Int] == ["com.example.upload": 1])
        #expect(counts["nextDueDate"] as? String == "2096-01-25T05:10:00.000Z")
        let statsLines = statsTable.output.split(separator: "\n").map { $0.split(separator: " ", omittingEmptySubsequences: true).joined(separator: " ") }
        #expect(statsLines.contains("periodic 1 com.example.upload 1"))
        #expect(statsLines.contains("next due: 2096-01-25T05:10:00.000Z"))

        // When a record due now is added
        let due = try makeRecord(index: 3)
        do {
            let store = try RecordStore(directory: directory.store)
            try store.add(due)
            store.close()
        }
        let dueText = try await Self.inspect("show", directory.store.path, due.id)
        let dueJSON = try await Self.inspect("show", directory.store.path, due.id, "--json")
        let dueTable = try await Self.inspect("list", directory.store.path)
        let statsNow = try await Self.inspect("stats", directory.store.path)
        let empty = try TemporaryDirectory()
        try RecordStore(directory: empty.store).close()
        let emptyStats = try await Self.inspect("stats", empty.store.path, "--json")

        // Then it reads as due now everywhere, and so does the store
        let dueLines = dueText.output.split(separator: "\n").map { $0.split(separator: " ", omittingEmptySubsequences: true).joined(separator: " ") }
        #expect(dueLines.contains("due: now"))
        #expect(try dueJSON.json()["due"] is NSNull)
        let dueRow = try #require(dueTable.output.split(separator: "\n").first { $0.hasPrefix(due.id) })
        #expect(dueRow.split(separator: " ", omittingEmptySubsequences: true).suffix(3) == ["-", "now", "-"])
        #expect(statsNow.output.contains("next due: now"))
        // And a store without pending records has no next due date
        #expect(emptyStats.status == 0, "\(emptyStats.error)")
        #expect(try emptyStats.json()["nextDueDate"] is NSNull)
        #expect(try emptyStats.json()["periodic"] as? Int == 0)
    }

    @Test func exportWritesARecordFileThatDecodesEqualToTheStoredRecordWithoutChangingTheStore() async throws {
        // Given a store with pending and failed records, and an empty directory to export into
        let sample = try SampleStore()
        let before = try sample.snapshot()
        let exports = try Self.exportDirectory(beside: sample)
        let failedFile = exports.appendingPathComponent("refused.record")

        // When a pending record is exported by its identifier typed in lowercase, to the current
        // directory, and the failed record to a path of its own
        let pending = try await Self.inspect(in: exports, "export", sample.path, sample.first.id.lowercased())
        let failed = try await Self.inspect("export", sample.path, sample.failed.id, "--output", failedFile.path, "--json")

        // Then the pending record's file is named after it and holds the record format's bytes,
        // which decode equal to the stored record, in the lowest format version that holds it
        // (as a record file of the earlier layout; the journal's own version is 5)
        #expect(pending.status == 0, "\(pending.error)")
        let pendingBytes = try Data(contentsOf: exports.appendingPathComponent("\(sample.first.id).record"))
        #expect(pendingBytes.starts(with: RecordFormat.magic))
        let storedPending = try #require(try Self.storedRecord(sample.first.id, in: sample.path))
        let decodedPending = try RecordFormat.decode(pendingBytes)
        #expect(decodedPending == storedPending)
        #expect(decodedPending.formatVersion == storedPending.requiredFormatVersion && storedPending.formatVersion == 5)
        #expect(pendingBytes == (try RecordFormat.encode(storedPending)))
        // And so does the failed record's, with its failure reason
        #expect(failed.status == 0, "\(failed.error)")
        let decodedFailed = try RecordFormat.decode(try Data(contentsOf: failedFile))
        #expect(decodedFailed == (try Self.storedRecord(sample.failed.id, in: sample.path)))
        #expect(decodedFailed == sample.failed)
        #expect(decodedFailed.failureReason == "403 upload refused")
        // And each run says where it wrote, and the record's type and area
        let lines = Self.squeezedLines(pending.output)
        #expect(lines.first?.hasPrefix("wrote ") == true && lines.first?.contains("\(sample.first.id).record") == true)
        #expect(lines.contains("type: com.example.upload"))
        #expect(lines.contains("area: pending"))
        let report = try failed.json()
        #expect(report["exported"] as? String == failedFile.path)
        #expect(report["content"] as? String == "record")
        #expect(report["id"] as? String == sample.failed.id)
        #expect(report["typeIdentifier"] as? String == "com.example.upload")
        #expect(report["area"] as? String == "failed")
        // And nothing in the store changed
        #expect(try sample.snapshot() == before)
    }

    @Test func exportWithPayloadWritesThePayloadBytesAlone() async throws {
        // Given a store with a record whose payload is a property list and one whose payload is not
        let sample = try SampleStore()
        let before = try sample.snapshot()
        let exports = try Self.exportDirectory(beside: sample)
        let garbageFile = exports.appendingPathComponent("garbage.plist")

        // When their payloads are exported, to the current directory and to a path of its own
        let payload = try await Self.inspect(in: exports, "export", sample.path, sample.first.id, "--payload")
        let garbage = try await Self.inspect("export", sample.path, sample.second.id, "--payload", "--output", garbageFile.path, "--json")

        // Then each file holds the record's payload bytes and nothing else, as stored
        #expect(payload.status == 0, "\(payload.error)")
        let bytes = try Data(contentsOf: exports.appendingPathComponent("\(sample.first.id).payload.plist"))
        #expect(bytes == sample.first.payload)
        #expect(bytes.starts(with: Data("bplist00".utf8)))
        var expected = SamplePayload.example
        expected.attempt = 1
        #expect(try RecordFormat.decodePayload(SamplePayload.self, from: bytes) == expected)
        #expect(Self.squeezedLines(payload.output).contains("area: pending"))
        #expect(garbage.status == 0, "\(garbage.error)")
        #expect(try Data(contentsOf: garbageFile) == sample.second.payload)
        #expect(try garbage.json()["content"] as? String == "payload")
        #expect(try garbage.json()["bytes"] as? Int == sample.second.payload.count)
        // And nothing in the store changed
        #expect(try sample.snapshot() == before)
    }

    @Test func exportRefusesToOverwriteAFileOrWriteInsideTheStoreAndNamesAnUnknownRecord() async throws {
        // Given a store, a file where an export would go, and an identifier no record has
        let sample = try SampleStore()
        let before = try sample.snapshot()
        let exports = try Self.exportDirectory(beside: sample)
        let existing = exports.appendingPathComponent("existing.record")
        try Data("keep me".utf8).write(to: existing)
        let unknown = UUID().uuidString

        // When export is asked to write over that file, into the store (by path, and by default
        // from inside it), for the unknown identifier, from a missing store, and --payload given to list
        let overwrite = try await Self.inspect("export", sample.path, sample.first.id, "--output", existing.path)
        let intoPending = try await Self.inspect(
            "export", sample.path, sample.first.id, "--output", sample.directory.path("pending", "\(sample.first.id).record")
        )
        let fromInsideStore = try await Self.inspect(in: sample.directory.store, "export", ".", sample.first.id)
        let missing = try await Self.inspect(in: exports, "export", sample.path, unknown)
        let noStore = try await Self.inspect(in: exports, "export", sample.directory.url.appendingPathComponent("nowhere").path, sample.first.id)
        let misplaced = try await Self.inspect("list", sample.path, "--payload")

        // Then each is a clear error with exit status 1, and the existing file is as it was
        #expect(overwrite.status == 1)
        #expect(overwrite.error.contains("exists already"))
        #expect(try Data(contentsOf: existing) == Data("keep me".utf8))
        for inside in [intoPending, fromInsideStore] {
            #expect(inside.status == 1)
            #expect(inside.error.contains("inside the store directory"), "\(inside.error)")
        }
        #expect(missing.status == 1)
        #expect(missing.error.contains("no record \(unknown) in the store"), "\(missing.error)")
        #expect(noStore.status == 1)
        #expect(noStore.error.contains("does not exist"))
        // And an option of export's elsewhere is a usage error
        #expect(misplaced.status == 2)
        #expect(misplaced.error.contains("--payload applies to export, and to failed --json"))
        // And nothing was written: the export directory holds only the file that was there, and
        // nothing in the store changed
        #expect(try FileManager.default.contentsOfDirectory(atPath: exports.path) == ["existing.record"])
        #expect(try sample.snapshot() == before)
    }

    @Test func aMissingDirectoryOrABadCommandLineIsAClearError() async throws {
        let directory = try TemporaryDirectory()
        let missing = directory.url.appendingPathComponent("nowhere").path

        let list = try await Self.inspect("list", missing)
        let retry = try await Self.inspect("retry-failed", missing, "--all")
        let notAStore = try await Self.inspect("stats", directory.url.path)
        let usage = try await Self.inspect("list")
        let unknown = try await Self.inspect("frobnicate", directory.url.path)

        #expect(list.status == 1)
        #expect(list.error.contains("does not exist"))
        // A changing command does not create a store where there was none
        #expect(retry.status == 1)
        #expect(!FileManager.default.fileExists(atPath: missing))
        #expect(notAStore.status == 1)
        #expect(notAStore.error.contains("not a store directory"))
        #expect(usage.status == 2)
        #expect(usage.error.contains("usage: store-inspector"))
        #expect(unknown.status == 2)
        #expect(unknown.error.contains("unknown command frobnicate"))
    }
}
