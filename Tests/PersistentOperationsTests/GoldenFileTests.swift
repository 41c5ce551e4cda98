import Foundation
import Testing
@testable import PersistentOperations

/// Record files of every released format version, committed under `Fixtures/` and frozen:
/// a later version of the library must still read them field for field.
@Suite("Golden files")
struct GoldenFileTests {
    /// The records the version 1 golden files were generated from.
    static let version1Records: [String: OperationRecord] = [
        "v1-minimal.record": OperationRecord(
            id: "00000000-0000-4000-8000-000000000001",
            typeIdentifier: "com.example.ping",
            payload: Data(),
            enqueueSequence: 1,
            enqueuedAt: Date(timeIntervalSinceReferenceDate: 760_000_000)
        ),
        "v1-full.record": OperationRecord(
            id: "6F1C2D3E-4A5B-4C6D-8E9F-0A1B2C3D4E5F",
            typeIdentifier: "com.example.upload",
            payload: Data([0x62, 0x70, 0x6C, 0x69, 0x73, 0x74]),
            priority: -3,
            enqueueSequence: 0xFFFF_FFFF_FFFF_FFF0,
            enqueuedAt: Date(timeIntervalSinceReferenceDate: 760_000_000.123_456),
            notBefore: Date(timeIntervalSinceReferenceDate: 760_000_060.5),
            tags: ["photos", "$null", "日本語 🎉"],
            uniqueKey: "avatar/user-42",
            numberOfRetries: 4,
            numberOfAttempts: 6,
            nextAttemptAt: Date(timeIntervalSinceReferenceDate: 760_000_120.25),
            attemptsInFlight: 1,
            lastErrorDescription: "The network connection was lost."
        ),
        "v1-failed.record": OperationRecord(
            id: "A0B1C2D3-E4F5-4A6B-9C7D-8E9FA0B1C2D3",
            typeIdentifier: "com.example.sync",
            payload: Data(repeating: 0xAB, count: 40),
            priority: 10,
            enqueueSequence: 77,
            enqueuedAt: Date(timeIntervalSinceReferenceDate: -1.5),
            tags: [],
            numberOfRetries: 10,
            numberOfAttempts: 11,
            attemptsInFlight: 3,
            lastErrorDescription: "HTTP 503",
            failureReason: "Crashed during 3 consecutive launches."
        ),
    ]

    /// The records the version 2 golden files were generated from: a dependent in a batch, and
    /// a failed record naming the prerequisite that failed it.
    static let version2Records: [String: OperationRecord] = [
        "v2-dependent.record": OperationRecord(
            id: "11111111-2222-4333-8444-555555555555",
            typeIdentifier: "com.example.publish",
            payload: Data([0x62, 0x70, 0x6C, 0x69, 0x73, 0x74, 0x30, 0x30]),
            priority: 4,
            enqueueSequence: 12,
            enqueuedAt: Date(timeIntervalSinceReferenceDate: 760_000_000.25),
            tags: ["album:42"],
            prerequisites: ["6F1C2D3E-4A5B-4C6D-8E9F-0A1B2C3D4E5F", "A0B1C2D3-E4F5-4A6B-9C7D-8E9FA0B1C2D3"],
            batchID: "99999999-8888-4777-8666-555555555555"
        ),
        "v2-failed-dependent.record": OperationRecord(
            id: "22222222-3333-4444-8555-666666666666",
            typeIdentifier: "com.example.upload",
            payload: Data(repeating: 0x5A, count: 12),
            enqueueSequence: 13,
            enqueuedAt: Date(timeIntervalSinceReferenceDate: 760_000_001),
            lastErrorDescription: "prerequisite 6F1C2D3E-4A5B-4C6D-8E9F-0A1B2C3D4E5F failed for good",
            failureReason: "prerequisite 6F1C2D3E-4A5B-4C6D-8E9F-0A1B2C3D4E5F failed for good",
            prerequisites: ["6F1C2D3E-4A5B-4C6D-8E9F-0A1B2C3D4E5F"],
            failedPrerequisite: "6F1C2D3E-4A5B-4C6D-8E9F-0A1B2C3D4E5F"
        ),
    ]

    /// The record the version 3 golden file was generated from: an expiring dependent.
    static let version3Records: [String: OperationRecord] = [
        "v3-expiring.record": OperationRecord(
            id: "33333333-4444-4555-8666-777777777777",
            typeIdentifier: "com.example.reminder",
            payload: Data([0x62, 0x70, 0x6C, 0x69, 0x73, 0x74, 0x30, 0x30, 0x01]),
            priority: 8,
            enqueueSequence: 21,
            enqueuedAt: Date(timeIntervalSinceReferenceDate: 760_000_002.5),
            notBefore: Date(timeIntervalSinceReferenceDate: 760_000_600),
            tags: ["reminders"],
            numberOfRetries: 1,
            numberOfAttempts: 2,
            nextAttemptAt: Date(timeIntervalSinceReferenceDate: 760_000_030),
            lastErrorDescription: "RetryingOperationError.attemptTimedOut: attempt 2 did not end within its timeout of 30.0 s",
            prerequisites: ["6F1C2D3E-4A5B-4C6D-8E9F-0A1B2C3D4E5F"],
            expiresAt: Date(timeIntervalSinceReferenceDate: 760_086_400.75)
        ),
    ]

    /// The record the version 4 golden file was generated from: a periodic series between
    /// periods, with a flex window, after a failed period.
    static let version4Records: [String: OperationRecord] = [
        "v4-periodic.record": OperationRecord(
            id: "44444444-5555-4666-8777-888888888888",
            typeIdentifier: "com.example.refresh",
            payload: Data([0x62, 0x70, 0x6C, 0x69, 0x73, 0x74, 0x30, 0x30, 0x02]),
            priority: 4,
            enqueueSequence: 34,
            enqueuedAt: Date(timeIntervalSinceReferenceDate: 760_000_000),
            notBefore: Date(timeIntervalSinceReferenceDate: 760_010_200),
            tags: ["refresh"],
            uniqueKey: "catalogue",
            lastErrorDescription: "503 server busy",
            expiresAt: Date(timeIntervalSinceReferenceDate: 790_000_000),
            repeatInterval: 3_600,
            repeatFlex: 600,
            periodTarget: Date(timeIntervalSinceReferenceDate: 760_010_800),
            completedPeriods: 3
        ),
    ]

    /// The records the version 5 golden files were generated from (the journal's format): one
    /// whose defaulted fields are all left out, and one that holds every field of version 4
    /// with none of them at its default.
    static let version5Records: [String: OperationRecord] = [
        "v5-defaults.record": OperationRecord(
            id: "55555555-6666-4777-8888-999999999999",
            typeIdentifier: "com.example.upload",
            payload: Data([0x62, 0x70, 0x6C, 0x69, 0x73, 0x74, 0x30, 0x30, 0x05]),
            enqueueSequence: 51,
            enqueuedAt: Date(timeIntervalSinceReferenceDate: 760_000_000.25)
        ),
        "v5-full.record": OperationRecord(
            id: "5A5A5A5A-6B6B-4C7C-8D8D-9E9E9E9E9E9E",
            typeIdentifier: "com.example.refresh",
            payload: Data(repeating: 0x5F, count: 12),
            priority: -4,
            enqueueSequence: 0xFFFF_FFFF_FFFF_FF05,
            enqueuedAt: Date(timeIntervalSinceReferenceDate: 760_000_000),
            notBefore: Date(timeIntervalSinceReferenceDate: 760_010_200),
            tags: ["$null", "refresh"],
            uniqueKey: "catalogue",
            numberOfRetries: 2,
            numberOfAttempts: 3,
            nextAttemptAt: Date(timeIntervalSinceReferenceDate: 760_000_300.5),
            attemptsInFlight: 1,
            lastErrorDescription: "503 server busy",
            prerequisites: ["00000000-0000-4000-8000-000000000001"],
            expiresAt: Date(timeIntervalSinceReferenceDate: 790_000_000),
            conditions: ["network"],
            repeatInterval: 3_600,
            repeatFlex: 600,
            periodTarget: Date(timeIntervalSinceReferenceDate: 760_010_800),
            completedPeriods: 3
        ),
    ]

    /// The records the version 6 golden files were generated from (records in a lane): one in
    /// a lane with nothing else set, and a failed one that holds its lane.
    static let version6Records: [String: OperationRecord] = [
        "v6-lane.record": OperationRecord(
            id: "66666666-7777-4888-9999-AAAAAAAAAAAA",
            typeIdentifier: "com.example.send-message",
            payload: Data([0x62, 0x70, 0x6C, 0x69, 0x73, 0x74, 0x30, 0x30, 0x06]),
            enqueueSequence: 61,
            enqueuedAt: Date(timeIntervalSinceReferenceDate: 760_000_000.5),
            lane: "chat:42"
        ),
        "v6-holding-lane.record": OperationRecord(
            id: "6B6B6B6B-7C7C-4D8D-9E9E-AFAFAFAFAFAF",
            typeIdentifier: "com.example.send-message",
            payload: Data(repeating: 0x6F, count: 10),
            priority: 4,
            enqueueSequence: 62,
            enqueuedAt: Date(timeIntervalSinceReferenceDate: 760_000_000),
            tags: ["chat"],
            numberOfAttempts: 1,
            lastErrorDescription: "413 too large",
            failureReason: "413 too large",
            lane: "chat:7",
            laneHoldsOnFailure: true,
            isHoldingLane: true
        ),
    ]

    /// The payload the version 1 payload golden file holds.
    struct GoldenPayload: Codable, Equatable {
        var name: String
        var count: Int
        var createdAt: Date
        var ratio: Double
        var items: [String: [UInt64]]
        var note: String?
    }

    static let version1Payload = GoldenPayload(
        name: "golden ✓",
        count: -42,
        createdAt: Date(timeIntervalSinceReferenceDate: 760_000_000.987_654),
        ratio: 2.5e-8,
        items: ["big": [UInt64.max, 0], "small": [7]],
        note: nil
    )

    static func fixtureURL(_ name: String) throws -> URL {
        try #require(Bundle.module.url(forResource: name, withExtension: nil, subdirectory: "Fixtures"))
    }

    @Test(arguments: version1Records.keys.sorted())
    func aVersion1GoldenFileDecodesToItsRecord(name: String) throws {
        // Given a frozen version 1 record file
        let data = try Data(contentsOf: try Self.fixtureURL(name))
        // When it is decoded by this version of the library
        let record = try RecordFormat.decode(data)
        // Then every field has the value it was written with
        let expected = try #require(Self.version1Records[name])
        #expect(record.formatVersion == 1)
        #expect(record.id == expected.id)
        #expect(record.typeIdentifier == expected.typeIdentifier)
        #expect(record.payload == expected.payload)
        #expect(record.priority == expected.priority)
        #expect(record.enqueueSequence == expected.enqueueSequence)
        #expect(record.enqueuedAt == expected.enqueuedAt)
        #expect(record.notBefore == expected.notBefore)
        #expect(record.tags == expected.tags)
        #expect(record.uniqueKey == expected.uniqueKey)
        #expect(record.numberOfRetries == expected.numberOfRetries)
        #expect(record.numberOfAttempts == expected.numberOfAttempts)
        #expect(record.nextAttemptAt == expected.nextAttemptAt)
        #expect(record.attemptsInFlight == expected.attemptsInFlight)
        #expect(record.lastErrorDescription == expected.lastErrorDescription)
        #expect(record.failureReason == expected.failureReason)
        #expect(record == expected)
    }

    @Test(arguments: version1Records.keys.sorted())
    func theWriterStillProducesTheGoldenBytes(name: String) throws {
        // Equal records encode to equal bytes (sorted keys, no shared objects), so a change
        // here means the format changed: add a new version and new golden files instead.
        let golden = try Data(contentsOf: try Self.fixtureURL(name))
        #expect(try RecordFormat.encode(try #require(Self.version1Records[name])) == golden)
    }

    @Test(arguments: version2Records.keys.sorted())
    func aVersion2GoldenFileDecodesToItsRecordAndIsWrittenTheSame(name: String) throws {
        // Given a frozen version 2 record file
        let golden = try Data(contentsOf: try Self.fixtureURL(name))
        let expected = try #require(Self.version2Records[name])
        // When it is decoded, then it has every field it was written with, graph fields included
        let record = try RecordFormat.decode(golden)
        #expect(record.formatVersion == 2)
        #expect(record.prerequisites == expected.prerequisites)
        #expect(record.batchID == expected.batchID)
        #expect(record.failedPrerequisite == expected.failedPrerequisite)
        #expect(record == expected)
        // And the writer still produces the same bytes
        #expect(try RecordFormat.encode(expected) == golden)
    }

    @Test(arguments: version3Records.keys.sorted())
    func aVersion3GoldenFileDecodesToItsRecordAndIsWrittenTheSame(name: String) throws {
        let golden = try Data(contentsOf: try Self.fixtureURL(name))
        let expected = try #require(Self.version3Records[name])
        let record = try RecordFormat.decode(golden)
        #expect(record.formatVersion == 3)
        #expect(record.expiresAt == expected.expiresAt)
        #expect(record.prerequisites == expected.prerequisites)
        #expect(record == expected)
        #expect(try RecordFormat.encode(expected) == golden)
    }

    @Test(arguments: version4Records.keys.sorted())
    func aVersion4GoldenFileDecodesToItsRecordAndIsWrittenTheSame(name: String) throws {
        let golden = try Data(contentsOf: try Self.fixtureURL(name))
        let expected = try #require(Self.version4Records[name])
        let record = try RecordFormat.decode(golden)
        #expect(record.formatVersion == 4)
        #expect(record.repeatInterval == 3_600 && record.repeatFlex == 600 && record.completedPeriods == 3)
        #expect(record.periodTarget == expected.periodTarget)
        #expect(record == expected)
        #expect(try RecordFormat.encode(expected) == golden)
    }

    @Test(arguments: version5Records.keys.sorted())
    func aVersion5GoldenFileDecodesToItsRecordAndIsWrittenTheSame(name: String) throws {
        let golden = try Data(contentsOf: try Self.fixtureURL(name))
        let expected = try #require(Self.version5Records[name])
        let record = try RecordFormat.decode(golden)
        #expect(record.formatVersion == 5)
        #expect(record == expected)
        #expect(try RecordFormat.encode(expected, formatVersion: 5) == golden)
    }

    @Test(arguments: version6Records.keys.sorted())
    func aVersion6GoldenFileDecodesToItsRecordAndIsWrittenTheSame(name: String) throws {
        let golden = try Data(contentsOf: try Self.fixtureURL(name))
        let expected = try #require(Self.version6Records[name])
        let record = try RecordFormat.decode(golden)
        #expect(record.formatVersion == 6 && record.lane != nil)
        #expect(record == expected)
        #expect(try RecordFormat.encode(expected, formatVersion: expected.journalFormatVersion) == golden)
    }

    @Test func version5LeavesOutExactlyTheFieldsThatHoldTheirDefault() throws {
        func keys(_ file: Data) throws -> Set<String> {
            guard case .dictionary(let entries) = try BinaryPropertyListReader.value(from: file.dropFirst(RecordFormat.headerSize)) else {
                Issue.record("the body is not a dictionary")
                return []
            }
            return Set(entries.keys)
        }
        let defaulted: Set = ["priority", "tags", "numberOfRetries", "numberOfAttempts", "attemptsInFlight"]
        // A record with every one of them at its default leaves them all out in version 5…
        let plain = try #require(Self.version5Records["v5-defaults.record"])
        let compact = try keys(try RecordFormat.encode(plain, formatVersion: 5))
        #expect(compact.isDisjoint(with: defaulted))
        #expect(compact.isSuperset(of: ["formatVersion", "id", "typeIdentifier", "payload", "enqueueSequence", "enqueuedAt"]))
        // …and keeps them in version 1, where they are required
        #expect(try keys(try RecordFormat.encode(plain)).isSuperset(of: defaulted))
        // Each one set to another value is written, and reads back
        for field in defaulted.sorted() {
            var record = plain
            switch field {
            case "priority": record.priority = -1
            case "tags": record.tags = ["a"]
            case "numberOfRetries": record.numberOfRetries = 1
            case "numberOfAttempts": record.numberOfAttempts = 1
            default: record.attemptsInFlight = 1
            }
            let file = try RecordFormat.encode(record, formatVersion: 5)
            #expect(try keys(file).intersection(defaulted) == [field])
            #expect(try RecordFormat.decode(file) == record, "\(field)")
        }
    }

    @Test func aFieldLeftOutIsStillMissingInAVersionThatRequiresIt() throws {
        // Given the version 5 file of a record with defaults, relabelled as version 4 with a
        // valid checksum: its body lacks "priority" and the others, which version 4 requires
        let plain = try #require(Self.version5Records["v5-defaults.record"])
        guard case .dictionary(var entries) = try BinaryPropertyListReader.value(from: try RecordFormat.encode(plain, formatVersion: 5).dropFirst(RecordFormat.headerSize)) else {
            Issue.record("the body is not a dictionary")
            return
        }
        entries["formatVersion"] = .integer(4)
        let file = recordFile(body: BinaryPropertyListWriter.data(for: .dictionary(entries)), version: 4)
        // Then it is corrupt, naming a missing field, not read with defaults
        let error = #expect(throws: PersistenceError.self) { try RecordFormat.decode(file) }
        #expect(error?.code == .corruptRecord)
        #expect(error?.message.contains("is missing") == true)
    }

    @Test func onlyAPeriodicRecordIsWrittenAsVersion4() throws {
        // A reader of version 3 would remove a series after one run: it must see a newer version.
        var record = try #require(Self.version3Records["v3-expiring.record"])
        #expect(try RecordFormat.encode(record)[9] == 3)
        record.repeatInterval = 60
        record.periodTarget = record.enqueuedAt
        let file = try RecordFormat.encode(record)
        #expect(file[8] == 0 && file[9] == 4)
        #expect(try RecordFormat.decode(file).repeatInterval == 60)
    }

    @Test func onlyARecordWithAnExpirationDateIsWrittenAsVersion3() throws {
        // A reader of version 2 would run an expired record: it must see a newer version.
        var record = try #require(Self.version2Records["v2-dependent.record"])
        #expect(try RecordFormat.encode(record)[9] == 2)
        record.expiresAt = Date(timeIntervalSinceReferenceDate: 760_000_000)
        let file = try RecordFormat.encode(record)
        #expect(file[8] == 0 && file[9] == 3)
        #expect(try RecordFormat.decode(file).expiresAt == record.expiresAt)
    }

    @Test func aRecordWithoutGraphFieldsIsStillWrittenAsVersion1() throws {
        // A reader of version 1 can read whatever needs nothing newer.
        let record = try #require(Self.version1Records["v1-full.record"])
        let file = try RecordFormat.encode(record)
        #expect(file[8] == 0 && file[9] == 1)
        var dependent = record
        dependent.prerequisites = [record.id]
        let graphFile = try RecordFormat.encode(dependent)
        #expect(graphFile[8] == 0 && graphFile[9] == 2)
    }

    @Test func theVersion1PayloadGoldenFileDecodesToItsPayload() throws {
        // Given a payload encoded by version 1 (wrapped under the key "value")
        let data = try Data(contentsOf: try Self.fixtureURL("v1-payload.bplist"))
        // When it is decoded, then every field is as written
        #expect(try RecordFormat.decodePayload(GoldenPayload.self, from: data) == Self.version1Payload)
    }

    /// Writes the golden files that do not exist yet (released ones are never rewritten); run
    /// once per new format version with
    /// `GENERATE_GOLDEN_FILES=1 swift test --filter generateGoldenFiles`, then commit them.
    @Test(.enabled(if: ProcessInfo.processInfo.environment["GENERATE_GOLDEN_FILES"] == "1"))
    func generateGoldenFiles() throws {
        let fixtures = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures")
        let all = Self.version1Records.merging(Self.version2Records, uniquingKeysWith: { first, _ in first })
            .merging(Self.version3Records, uniquingKeysWith: { first, _ in first })
            .merging(Self.version4Records, uniquingKeysWith: { first, _ in first })
        for (name, record) in all {
            guard !FileManager.default.fileExists(atPath: fixtures.appendingPathComponent(name).path) else { continue }   // released files are frozen
            try RecordFormat.encode(record).write(to: fixtures.appendingPathComponent(name))
        }
        for (name, record) in Self.version5Records where !FileManager.default.fileExists(atPath: fixtures.appendingPathComponent(name).path) {
            try RecordFormat.encode(record, formatVersion: 5).write(to: fixtures.appendingPathComponent(name))
        }
        for (name, record) in Self.version6Records where !FileManager.default.fileExists(atPath: fixtures.appendingPathComponent(name).path) {
            try RecordFormat.encode(record, formatVersion: 6).write(to: fixtures.appendingPathComponent(name))
        }
        let payloadFile = fixtures.appendingPathComponent("v1-payload.bplist")
        if !FileManager.default.fileExists(atPath: payloadFile.path) {
            try RecordFormat.encodePayload(Self.version1Payload).write(to: payloadFile)
        }
    }
}
