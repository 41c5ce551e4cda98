import CrashHarness
import Foundation
import Testing
@testable import PersistentOperations

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

@Suite("Malformed records")
struct MalformedRecordTests {
    /// A file placed in `pending/`, and what loading it must do.
    struct Entry {
        enum Expectation { case loads, quarantined, skipped }
        var label: String
        var name: String
        var expectation: Expectation
        var create: (String) throws -> Void
    }

    static func file(_ bytes: Data) -> (String) throws -> Void {
        { path in try bytes.write(to: URL(fileURLWithPath: path)) }
    }

    static func recordName() -> String {
        StoreLayout.fileName(ofRecord: UUID().uuidString)
    }

    /// A valid record file for a record stored under `name`.
    static func goodFile(named name: String, index: Int) throws -> Data {
        var record = try makeRecord(index: index)
        record.id = StoreLayout.recordIdentifier(fromFileName: name) ?? record.id
        return try RecordFormat.encode(record)
    }

    static func entries(directory: TemporaryDirectory) throws -> [Entry] {
        var entries: [Entry] = []
        func add(_ label: String, _ expectation: Entry.Expectation, name: String = recordName(), _ bytes: (String) throws -> Data) throws {
            entries.append(Entry(label: label, name: name, expectation: expectation, create: file(try bytes(name))))
        }
        for index in 0..<5 {
            try add("good \(index)", .loads) { try goodFile(named: $0, index: index) }
        }
        try add("empty file", .quarantined) { _ in Data() }
        try add("truncated header", .quarantined) { Data(try goodFile(named: $0, index: 9).prefix(10)) }
        try add("truncated body", .quarantined) { Data(try goodFile(named: $0, index: 9).dropLast(10)) }
        try add("wrong magic", .quarantined) { var data = try goodFile(named: $0, index: 9); data[1] = 0x58; return data }
        try add("version 0", .quarantined) { var data = try goodFile(named: $0, index: 9); data[9] = 0; return data }
        try add("reserved bits set", .quarantined) { var data = try goodFile(named: $0, index: 9); data[11] = 1; return data }
        try add("length mismatch", .quarantined) { var data = try goodFile(named: $0, index: 9); data[15] &+= 1; return data }
        try add("CRC mismatch", .quarantined) { var data = try goodFile(named: $0, index: 9); data[19] ^= 0x40; return data }
        try add("newer format version", .skipped) { name in
            recordFile(body: Data(try goodFile(named: name, index: 9).dropFirst(RecordFormat.headerSize)), version: UInt16(OperationRecord.currentFormatVersion + 1))
        }
        try add("identifier does not match the file name", .quarantined) { _ in try goodFile(named: recordName(), index: 9) }
        // Periodic records (version 4): a schedule that cannot be followed is refused, not guessed at
        func periodic(_ name: String, interval: Double, flex: Double = 0, target: Date? = Date(timeIntervalSinceReferenceDate: 0)) throws -> Data {
            var record = try makeRecord(index: 7)
            record.id = StoreLayout.recordIdentifier(fromFileName: name) ?? record.id
            record.repeatInterval = interval
            record.repeatFlex = flex
            record.periodTarget = target
            record.formatVersion = 4
            // Written around the encoder, which refuses a record it could not read back.
            return recordFile(body: BinaryPropertyListWriter.data(for: record.propertyListValue), version: 4)
        }
        try add("periodic, valid", .loads) { try periodic($0, interval: 60, flex: 10) }
        try add("periodic, negative interval", .quarantined) { try periodic($0, interval: -60) }
        try add("periodic, zero interval", .quarantined) { try periodic($0, interval: 0) }
        try add("periodic, infinite interval", .quarantined) { try periodic($0, interval: .infinity) }
        try add("periodic, flex beyond the interval", .quarantined) { try periodic($0, interval: 60, flex: 61) }
        try add("periodic, no period target", .quarantined) { try periodic($0, interval: 60, target: nil) }
        try add("unexpected name", .quarantined, name: "notes.txt") { _ in Data("hello".utf8) }
        try add("oversized file", .quarantined) { _ in Data(count: RecordFormat.defaultMaximumRecordSize + 1) }
        try add("plain binary plist without header", .quarantined) { _ in CraftedPropertyList.assemble(objects: [[0x10, 0x01]]) }
        for (label, body) in CraftedPropertyList.all {
            try add("crafted body with valid CRC: \(label)", .quarantined) { _ in recordFile(body: body) }
        }
        var generator = SeededGenerator(seed: 42)
        for flip in 0..<300 {
            let name = recordName()
            var data = try goodFile(named: name, index: 9)
            for _ in 0..<Int.random(in: 1...3, using: &generator) {
                data[Int.random(in: 0..<data.count, using: &generator)] ^= UInt8(1) << UInt8.random(in: 0..<8, using: &generator)
            }
            // A flip in the version field can make it look like a newer version: left in place.
            let version = Int(data[8]) << 8 | Int(data[9])
            let expectation: Entry.Expectation = version > OperationRecord.currentFormatVersion && data.starts(with: RecordFormat.magic) ? .skipped : .quarantined
            entries.append(Entry(label: "bit flip \(flip)", name: name, expectation: expectation, create: file(data)))
        }
        entries.append(Entry(label: "directory where a file belongs", name: recordName(), expectation: .quarantined) { path in
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
        })
        let linkTarget = directory.url.appendingPathComponent("outside.record")
        try goodFile(named: recordName(), index: 9).write(to: linkTarget)
        entries.append(Entry(label: "symbolic link", name: recordName(), expectation: .quarantined) { path in
            try FileManager.default.createSymbolicLink(atPath: path, withDestinationPath: linkTarget.path)
        })
        entries.append(Entry(label: "FIFO", name: recordName(), expectation: .quarantined) { path in
            guard mkfifo(path, 0o600) == 0 else { throw SystemCallError("mkfifo", path: path, code: errno) }
        })
        // Unreadable permissions: root reads it anyway; anyone else gets it quarantined.
        let unreadableName = recordName()
        entries.append(
            Entry(label: "mode 0000", name: unreadableName, expectation: getuid() == 0 ? .loads : .quarantined) { path in
                try goodFile(named: unreadableName, index: 8).write(to: URL(fileURLWithPath: path))
                chmod(path, 0)
            }
        )
        return entries
    }

    @Test func everyBadEntryIsQuarantinedAndEveryGoodRecordLoads() throws {
        // Given good records next to every kind of bad entry in pending/
        let directory = try TemporaryDirectory()
        try RecordStore(directory: directory.store, configuration: .files).close()
        let entries = try Self.entries(directory: directory)
        for entry in entries {
            try entry.create(directory.path("pending", entry.name))
        }
        // When the store loads the pending area (and the process does not crash)
        let store = try RecordStore(directory: directory.store, configuration: .files)
        let report = try store.loadPending()
        // Then each bad entry is quarantined with a reason, each good record is loaded,
        // and newer-version records stay in place
        func names(_ expectation: Entry.Expectation) -> Set<String> {
            Set(entries.filter { $0.expectation == expectation }.map(\.name))
        }
        let loadedNames = Set(report.records.map { StoreLayout.fileName(ofRecord: $0.id) })
        #expect(loadedNames == names(.loads))
        #expect(Set(report.quarantined.map(\.name)) == names(.quarantined))
        #expect(Set(report.skipped.map(\.name)) == names(.skipped))
        #expect(report.quarantined.allSatisfy { !$0.reason.isEmpty && $0.quarantineName == $0.name })
        for entry in entries {
            let quarantined = report.quarantined.first { $0.name == entry.name }
            let outcome = loadedNames.contains(entry.name) ? "loads" : quarantined.map { "quarantined: \($0.reason)" } ?? "skipped"
            let expected = "\(entry.expectation)"
            #expect(outcome.hasPrefix(expected), "\(entry.label) -> \(outcome)")
        }
        // And on disk, quarantine holds exactly the bad ones and pending exactly the rest
        #expect(try store.quarantinedEntryNames() == names(.quarantined).sorted())
        #expect(try directory.names(in: "pending") == names(.loads).union(names(.skipped)))
        // And each quarantined entry has its reason beside it, for the inspector
        let reasons = try store.quarantinedEntries()
        #expect(reasons.count == names(.quarantined).count)
        for (name, reason) in reasons {
            #expect(reason == report.quarantined.first { $0.name == name }?.reason)
        }
        #expect(try directory.names(in: "quarantine") == Set(names(.quarantined).flatMap { [$0, $0 + StoreLayout.reasonSuffix] }))
        // And a second load finds nothing new to quarantine
        let second = try store.loadPending()
        #expect(second.quarantined.isEmpty)
        #expect(second.records.count == report.records.count)
    }

    @Test func aBadEntryWhoseNameIsTakenInQuarantineGetsAFreshName() throws {
        let directory = try TemporaryDirectory()
        let store = try RecordStore(directory: directory.store, configuration: .files)
        let name = Self.recordName()
        for _ in 0..<2 {
            try Data("junk".utf8).write(to: URL(fileURLWithPath: directory.path("pending", name)))
            _ = try store.loadPending()
        }
        let quarantined = try store.quarantinedEntryNames()
        #expect(quarantined.count == 2)
        #expect(quarantined.contains(name))
    }
}
