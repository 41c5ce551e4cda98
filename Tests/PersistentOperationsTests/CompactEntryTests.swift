import CrashHarness
import Foundation
import Testing
@testable import PersistentOperations

/// Identifiers held as keys, records and entries held compact: each reads back exactly as it
/// was, and the table that holds entries compact behaves as the dictionary it replaces.
struct CompactEntryTests {
    // MARK: Keys

    @Test func aKeyReadsBackAsItsTextAndKeysAreEqualExactlyWhenTheirTextsAre() {
        var random = SeededGenerator(seed: 51)
        var texts: [String] = ["", "a", "ID-1", "6F1C9A4E-2B7D-4C1E-9F3A-0D5E8B7C6A21", "6f1c9a4e-2b7d-4c1e-9f3a-0d5e8b7c6a21"]
        for _ in 0..<500 {
            let uuid = RecordIdentifier.makeUUID()
            texts.append(uuid.uuidString)
            texts.append(uuid.uuidString.lowercased())
            // One character changed: another UUID, or no canonical one at all
            var bytes = Array(uuid.uuidString.utf8)
            bytes[Int.random(in: 0..<bytes.count, using: &random)] = Array("0123456789ABCDEFabcdefG-".utf8).randomElement(using: &random)!
            texts.append(String(decoding: bytes, as: UTF8.self))
        }
        let keys = texts.map(RecordKey.init)
        for (text, key) in zip(texts, keys) {
            #expect(key.string == text)
            // Held as bits exactly when the text is the canonical form of a UUID
            if case .uuid = key {
                #expect(UUID(uuidString: text)?.uuidString == text)
            } else {
                #expect(UUID(uuidString: text)?.uuidString != text)
            }
        }
        for _ in 0..<20_000 {
            let a = Int.random(in: 0..<texts.count, using: &random), b = Int.random(in: 0..<texts.count, using: &random)
            #expect((keys[a] == keys[b]) == (texts[a] == texts[b]), "\(texts[a]) \(texts[b])")
        }
        #expect(Set(keys).count == Set(texts).count)
    }

    @Test func theBitsOfAUUIDSpellItAsFoundationDoes() {
        for _ in 0..<2_000 {
            let uuid = UUID()
            let bits = UUIDBits(uuid)
            #expect(bits.uuid == uuid)
            #expect(RecordIdentifier.string(of: bits) == uuid.uuidString)
            #expect(RecordKey(uuid.uuidString) == .uuid(bits))
        }
        let extremes = [UUIDBits(high: 0, low: 0), UUIDBits(high: .max, low: .max), UUIDBits(high: 0x0123_4567_89AB_CDEF, low: 0xFEDC_BA98_7654_3210)]
        #expect(extremes.map(RecordIdentifier.string(of:)) == [
            "00000000-0000-0000-0000-000000000000", "FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF", "01234567-89AB-CDEF-FEDC-BA9876543210",
        ])
        #expect(extremes.map { UUIDBits($0.uuid) } == extremes)
    }

    @Test func anIdentifierHeldAsAKeyEncodesAsItsTextAsBefore() throws {
        // Given identifiers made from a record and from text
        let text = RecordIdentifier.make()
        let fromRecord = PersistentOperationID(record: text)
        let fromText = try #require(PersistentOperationID(text.lowercased()))
        // Then they are the same identifier, spelled the same
        #expect(fromRecord == fromText && fromRecord.hashValue == fromText.hashValue)
        #expect(fromRecord.rawValue == text && fromText.description == text)
        // And they encode as `{"rawValue": …}`, and decode from it
        let encoded = try JSONEncoder().encode(fromRecord)
        #expect(String(decoding: encoded, as: UTF8.self) == #"{"rawValue":"\#(text)"}"#)
        #expect(try JSONDecoder().decode(PersistentOperationID.self, from: encoded) == fromRecord)
        let other = try JSONDecoder().decode(PersistentOperationID.self, from: Data(#"{"rawValue":"not-a-uuid"}"#.utf8))
        #expect(other.rawValue == "not-a-uuid")
    }

    // MARK: Records and entries

    /// A record with every field the compact form holds set, and some of the rare ones.
    static func fullRecord(index: Int) -> OperationRecord {
        var record = OperationRecord(
            typeIdentifier: "com.example.upload", payload: Data(), priority: index % 5 - 2, enqueueSequence: UInt64(index) * 7 + 1,
            enqueuedAt: Date(timeIntervalSinceReferenceDate: 760_000_000.25 + Double(index)),
            notBefore: index % 2 == 0 ? Date(timeIntervalSinceReferenceDate: -1.5 * Double(index)) : nil,
            tags: index % 3 == 0 ? ["photos", "batch-\(index)"] : [], numberOfRetries: index % 4, numberOfAttempts: index % 6,
            nextAttemptAt: index % 3 == 1 ? Date(timeIntervalSinceReferenceDate: 1e9 + 0.125) : nil, attemptsInFlight: 0,
            lastErrorDescription: index % 5 == 0 ? "timed out" : nil, expiresAt: index % 7 == 0 ? .distantFuture : nil
        )
        record.formatVersion = index % OperationRecord.currentFormatVersion + 1
        return record
    }

    @Test func aCompactRecordReadsBackEqualFieldForField() throws {
        for index in 0..<60 {
            let record = Self.fullRecord(index: index)
            let compact = try #require(OperationRecord.Compact(record, type: 7))
            #expect(compact.type == 7)
            let again = compact.record(id: record.id, typeIdentifier: record.typeIdentifier)
            #expect(again == record, "record \(index)")
            #expect(again.formatVersion == record.formatVersion && again.tags == record.tags && again.expiresAt == record.expiresAt)
        }
        var extreme = Self.fullRecord(index: 1)
        extreme.notBefore = Date(timeIntervalSinceReferenceDate: 0)   // set, though 0
        extreme.nextAttemptAt = .distantPast
        extreme.priority = Int(Int8.min)
        extreme.enqueueSequence = .max
        extreme.numberOfRetries = Int(UInt16.max)
        extreme.numberOfAttempts = Int(UInt16.max)
        #expect(OperationRecord.Compact(extreme, type: .max)?.record(id: extreme.id, typeIdentifier: extreme.typeIdentifier) == extreme)
        extreme.priority = Int(Int8.max)
        #expect(OperationRecord.Compact(extreme, type: .max)?.record(id: extreme.id, typeIdentifier: extreme.typeIdentifier) == extreme)
    }

    @Test func recordsAndEntriesThatDoNotFitAreNotMadeCompact() throws {
        // A payload, a count past 16 bits, a priority past 8, a date that is NaN, or attempts
        // in flight counted by the record, and the record is kept whole
        var record = Self.fullRecord(index: 2)
        record.payload = Data([1])
        #expect(OperationRecord.Compact(record, type: 0) == nil)
        record.payload = Data()
        record.numberOfRetries = Int(UInt16.max) + 1
        #expect(OperationRecord.Compact(record, type: 0) == nil)
        record.numberOfRetries = -1
        #expect(OperationRecord.Compact(record, type: 0) == nil)
        record.numberOfRetries = 0
        record.numberOfAttempts = Int(UInt16.max) + 1
        #expect(OperationRecord.Compact(record, type: 0) == nil)
        record.numberOfAttempts = 0
        record.priority = 128
        #expect(OperationRecord.Compact(record, type: 0) == nil)
        record.priority = -129
        #expect(OperationRecord.Compact(record, type: 0) == nil)
        record.priority = 0
        record.notBefore = Date(timeIntervalSinceReferenceDate: .nan)
        #expect(OperationRecord.Compact(record, type: 0) == nil)
        record.notBefore = nil
        record.nextAttemptAt = Date(timeIntervalSinceReferenceDate: .nan)
        #expect(OperationRecord.Compact(record, type: 0) == nil)
        record.nextAttemptAt = nil
        record.attemptsInFlight = 1
        #expect(OperationRecord.Compact(record, type: 0) == nil)
        record.attemptsInFlight = 0
        #expect(OperationRecord.Compact(record, type: 0) != nil)
        // An entry with anything besides its record and a phase of waiting its turn
        let waiting = PersistentOperationQueue.Entry(record: record, operation: nil, attemptsInFlight: 0)
        #expect(waiting.compacted(type: 0) != nil)
        var changes: [(String, (inout PersistentOperationQueue.Entry) -> Void)] = [
            ("blocked", { $0.phase = .blocked }), ("running", { $0.phase = .running(nil) }), ("waiting to retry", { $0.phase = .waitingToRetry }),
            ("an operation", { $0.operation = BlockOperation() }), ("started", { $0.hasStarted = true }),
            ("crashes", { $0.crashes = 1 }), ("a condition", { $0.parkedUnder = "wifi" }), ("prerequisites", { $0.remainingPrerequisites = 1 }),
            ("a lane", { $0.waitsForLane = true }), ("ending", { $0.ending = .succeeded }), ("settled", { $0.isRecordSettled = true }),
            ("a suspect file", { $0.hasSuspectFile = true }), ("cancelled", { $0.isCancelRequested = true }),
            ("an attempt's start", { $0.attemptStartedAt = 1 }), ("a payload", { $0.record.payload = Data([1]) }),
            ("256 attempts in flight", { $0.attemptsInFlight = 256 }),
        ]
        let parked = BlockOperation()
        changes.append(("a parked operation", { $0.parkedOperation = parked }))
        for (name, change) in changes {
            var entry = waiting
            change(&entry)
            #expect(entry.compacted(type: 0) == nil, "\(name)")
        }
        withExtendedLifetime(parked) {}
    }

    @Test func anEntryHeldCompactReadsBackWholeWithItsPhase() throws {
        let timer = DueTimer(base: DispatchRetryScheduler())
        var table = PersistentOperationQueue.EntryTable()
        var expected: [String: PersistentOperationQueue.Entry] = [:]
        for index in 0..<40 {
            let record = Self.fullRecord(index: index)
            var entry = PersistentOperationQueue.Entry(record: record, operation: nil, attemptsInFlight: index % 3 == 2 ? 255 : index % 3)
            let token = DueTimer.Token(sequence: UInt64(index), timer: timer)
            entry.phase = index % 3 == 0 ? .ready : .scheduled(index % 3 == 1 ? token : nil)
            table[record.id] = entry
            expected[record.id] = entry
        }
        #expect(table.compactCount == 40)
        for (id, entry) in expected {
            let read = try #require(table[id])
            #expect(read.record == entry.record && read.record.formatVersion == entry.record.formatVersion)
            #expect(read.attemptsInFlight == entry.attemptsInFlight)
            #expect(Self.describe(read.phase) == Self.describe(entry.phase), "\(id)")
            #expect(Self.describe(table.phase(of: id)!) == Self.describe(entry.phase))
        }
    }

    @Test func anEntryAddedFromAPlainRecordsFieldsReadsBackAsOneAddedWholeAndIsReadiedInPlace() throws {
        // Given plain records, read back from their files as fields
        var table = PersistentOperationQueue.EntryTable()
        var typeIdentifiers: [String] = []
        var records: [OperationRecord] = []
        for index in 0..<30 {
            var record = Self.fullRecord(index: index)
            record = OperationRecord.plain(
                formatVersion: record.formatVersion, id: record.id, typeIdentifier: index % 3 == 0 ? "com.example.a" : "com.example.b",
                priority: record.priority, enqueueSequence: record.enqueueSequence, enqueuedAt: record.enqueuedAt, notBefore: record.notBefore,
                numberOfRetries: record.numberOfRetries, numberOfAttempts: record.numberOfAttempts, nextAttemptAt: record.nextAttemptAt,
                attemptsInFlight: record.attemptsInFlight
            )
            let file = try RecordFormat.encode(record)
            let fields = try #require(RecordFormat.plainFields(of: file, checksumVerified: false, typeIdentifiers: &typeIdentifiers))
            #expect(fields.record == record)
            #expect(fields.dueDate == record.dueDate && fields.runOrder == record.runOrder)
            // When each is added compact from its fields (as a restore does)
            let entry = PersistentOperationQueue.Entry.Compact(
                record: try #require(OperationRecord.Compact(plain: fields, type: table.typeOrdinal(of: fields.typeIdentifier))),
                timerToken: nil, attemptsInFlight: 0, isReady: false
            )
            let added = table.insertCompact(entry, uuid: fields.key)
            #expect(added == Int32(index))
            // Then a second entry of the same identifier is refused, and the first one stays
            let addedTwice = table.insertCompact(entry, uuid: fields.key)
            #expect(addedTwice == nil)
            records.append(record)
        }
        // (One copy of each type identifier.)
        #expect(typeIdentifiers == ["com.example.a", "com.example.b"])
        #expect(table.count == records.count && table.compactCount == records.count)
        for (index, record) in records.enumerated() {
            // It reads back as the record's own entry, scheduled, and is readied once (where
            // it was put, or, given another entry's position, found by its identifier)
            let read = try #require(table[record.id])
            #expect(read.record == record && read.attemptsInFlight == 0)
            #expect(Self.describe(read.phase) == "scheduled")
            let readied = table.readyIfBeingScheduled(RecordKey(record.id), hint: index.isMultiple(of: 2) ? Int32(index) : 0)
            let readiedTwice = table.readyIfBeingScheduled(RecordKey(record.id), hint: Int32(index))
            #expect(readied && !readiedTwice)
            #expect(Self.describe(try #require(table[record.id]).phase) == "ready")
        }
    }

    @Test func whatARestoreKeepsOfARecordUntilItIsScheduledTakes40BytesAndACompactEntry64() {
        #expect(MemoryLayout<PersistentOperationQueue.RestoredRecord>.stride == 40)
        #expect(MemoryLayout<OperationRecord.Compact>.stride == 56)
        #expect(MemoryLayout<PersistentOperationQueue.Entry.Compact>.stride == 64)
    }

    @Test func aRestoredRecordGivesBackItsIdentifierOrderAndDueDateExactly() {
        typealias Restored = PersistentOperationQueue.RestoredRecord
        let canonical = RecordIdentifier.make()
        let date = Date(timeIntervalSinceReferenceDate: 785_000_000.123_456)
        let cases: [(id: String, order: RunOrder, due: Date?, isPlain: Bool)] = [
            (canonical, RunOrder(priority: 4, enqueueSequence: 17), date, true),
            (canonical, RunOrder(priority: -8, enqueueSequence: 1 << 56 - 1), nil, true),
            (canonical, RunOrder(priority: 127, enqueueSequence: 0), nil, true),
            (canonical, RunOrder(priority: -128, enqueueSequence: 0), date, true),
            // Out of line: an identifier not in canonical form, a priority wider than 8 bits, a
            // sequence wider than 56, a due date that is not a number (a store written by hand)
            ("legacy-id", RunOrder(priority: 0, enqueueSequence: 1), date, false),
            (canonical, RunOrder(priority: Int.min, enqueueSequence: 2), nil, false),
            (canonical, RunOrder(priority: 128, enqueueSequence: 2), nil, false),
            (canonical, RunOrder(priority: -129, enqueueSequence: 2), nil, false),
            (canonical, RunOrder(priority: -8, enqueueSequence: .max), nil, false),
            (canonical, RunOrder(priority: 0, enqueueSequence: 1 << 56), date, false),
            (canonical, RunOrder(priority: 1, enqueueSequence: 3), Date(timeIntervalSinceReferenceDate: .nan), false),
        ]
        for (id, order, due, isPlain) in cases {
            var restored = Restored(id: id, order: order, due: due, prerequisites: [])
            #expect(restored.compactPosition == -1)
            // (Only a plain record keeps where its compact entry is: the others are scheduled
            // one at a time.)
            restored.compactPosition = 5
            #expect(restored.compactPosition == (isPlain ? 5 : -1))
            #expect(restored.id == id && restored.operationID.rawValue == id)
            #expect(restored.order.priority == order.priority && restored.order.enqueueSequence == order.enqueueSequence)
            #expect(restored.due?.timeIntervalSinceReferenceDate.bitPattern == due?.timeIntervalSinceReferenceDate.bitPattern)
            #expect(restored.isPlain == isPlain, "\(id) \(order) \(String(describing: due))")
        }
    }

    /// The phase, with the identity of its timer token.
    static func describe(_ phase: PersistentOperationQueue.Entry.Phase) -> String {
        switch phase {
        case .scheduled(let token?): "scheduled \(ObjectIdentifier(token))"
        case .scheduled(nil): "scheduled"
        case .ready: "ready"
        case .blocked: "blocked"
        default: "other"
        }
    }

    @Test func randomChangesOfEntriesHeldCompactAndWholeLeaveWhatADictionaryWouldHold() throws {
        // Given identifiers in canonical form (the entry may be held compact) and not
        var random = SeededGenerator(seed: 0xC0_3AC7)
        let canonical = (0..<48).map { _ in RecordIdentifier.make() }
        let ids = canonical + (0..<16).map { "text-\($0)" }
        var table = PersistentOperationQueue.EntryTable()
        var reference: [String: Expected] = [:]
        var mostCompact = 0
        for step in 0..<8_000 {
            let id = ids[Int.random(in: 0..<ids.count, using: &random)]
            let phase = ["ready", "scheduled", "blocked"].randomElement(using: &random)!
            let new = Expected(retries: step, phase: phase, payloadBytes: Int.random(in: 0..<4, using: &random) == 0 ? 2 : 0)
            switch Int.random(in: 0..<6, using: &random) {
            case 0:
                // Add or replace
                #expect(table.updateValue(Self.make(id, new), forKey: id).map(Self.seen) == reference[id])
                reference[id] = new
            case 1:
                #expect(table.removeValue(forKey: id).map(Self.seen) == reference.removeValue(forKey: id))
            case 2:
                // Change in place: a phase that may make it compact or whole
                let changed: Bool
                if step % 2 == 0 {
                    changed = table.withEntry(id) { (entry: inout PersistentOperationQueue.Entry) -> Void in
                        entry.record.numberOfRetries += 1
                        entry.phase = phase == "blocked" ? .blocked : .ready
                    } != nil
                } else {
                    changed = table[id] != nil
                    table[id]?.record.numberOfRetries += 1
                    table[id]?.phase = phase == "blocked" ? .blocked : .ready
                }
                #expect(changed == (reference[id] != nil))
                if reference[id] != nil {
                    reference[id]!.retries += 1
                    reference[id]!.phase = phase == "blocked" ? "blocked" : "ready"
                }
            case 3:
                // The payload dropped (as once an added operation is stored): may become compact
                table[id]?.record.payload = Data()
                reference[id]?.payloadBytes = 0
            case 4:
                table[id] = step % 3 == 0 ? nil : Self.make(id, new)
                reference[id] = step % 3 == 0 ? nil : new
            default:
                // Through an inout access: set nil removes
                CompactEntryTests.change(&table[id]) { $0 = nil }
                reference[id] = nil
            }
            #expect(table.count == reference.count)
            mostCompact = max(mostCompact, table.compactCount)
        }
        // Then every identifier finds its own entry, and iteration, keys, values and phases agree
        #expect(Dictionary(uniqueKeysWithValues: table.map { ($0.key, Self.seen($0.value)) }) == reference)
        #expect(Set(table.keys) == Set(reference.keys) && table.keys.count == reference.count)
        #expect(table.values.map(\.record.numberOfRetries).sorted() == reference.values.map(\.retries).sorted())
        for id in ids {
            #expect(table[id].map(Self.seen) == reference[id])
            #expect(table.phase(of: id).map(Self.describe) == reference[id]?.phase)
            #expect(table[id].map { $0.record.id == id } ?? true)
        }
        // Both kinds were held: compact (canonical, nothing but a record without payload,
        // waiting its turn) and whole
        #expect(mostCompact > 10 && table.compactCount < table.count)
    }

    struct Expected: Equatable {
        var retries: Int
        var phase: String
        var payloadBytes: Int
    }

    static func make(_ id: String, _ expected: Expected) -> PersistentOperationQueue.Entry {
        var record = OperationRecord(id: id, typeIdentifier: "t", payload: Data(repeating: 1, count: expected.payloadBytes), enqueueSequence: 1)
        record.numberOfRetries = expected.retries
        var entry = PersistentOperationQueue.Entry(record: record, operation: nil, attemptsInFlight: 0)
        entry.phase = expected.phase == "ready" ? .ready : expected.phase == "blocked" ? .blocked : .scheduled(nil)
        return entry
    }

    static func seen(_ entry: PersistentOperationQueue.Entry) -> Expected {
        Expected(retries: entry.record.numberOfRetries, phase: describe(entry.phase), payloadBytes: entry.record.payload.count)
    }

    private static func change(_ entry: inout PersistentOperationQueue.Entry?, _ body: (inout PersistentOperationQueue.Entry?) -> Void) {
        body(&entry)
    }
}
