import CrashHarness
import Foundation
import Testing
@testable import PersistentOperations

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Thousands of malformed record files mixed with good ones, restored in batches by a child
/// process (`crash-demo restore-report`), so that a trap would show as a crashed child.
///
/// CI runs 2,000 files; the full run is
///
///     PERSISTENT_OPERATIONS_FUZZ_COUNT=10000 swift test --filter CorruptFileFuzzTests
///
/// (`PERSISTENT_OPERATIONS_FUZZ_SEED` changes the seed). Any input that crashes the child is
/// copied to `Fixtures/FuzzCrashers/`, which ``FuzzCrasherRegressionTests`` replays.
@Suite("Corrupt-file fuzzing", .timeLimit(.minutes(10)), .serialized)
struct CorruptFileFuzzTests {
    static let environment = ProcessInfo.processInfo.environment
    static let fileCount = environment["PERSISTENT_OPERATIONS_FUZZ_COUNT"].flatMap(Int.init) ?? 2_000
    static let seed = environment["PERSISTENT_OPERATIONS_FUZZ_SEED"].flatMap(UInt64.init) ?? 0x5EED_F1E5
    static let batchSize = 500

    @Test func everyBadFileIsQuarantinedEveryGoodRecordRestoredAndNothingCrashes() async throws {
        var random = SeededGenerator(seed: Self.seed)
        var tally = Tally()
        var crashers: [String] = []
        let started = Date()
        var produced = 0
        while produced < Self.fileCount {
            let size = min(Self.batchSize, Self.fileCount - produced)
            produced += size
            // Given a store whose pending area holds good records and malformed entries
            let directory = try TemporaryDirectory()
            try RecordStore(directory: directory.store, configuration: .files).close()
            var entries: [FuzzEntry] = []
            for _ in 0..<size {
                let entry = try FuzzEntry.make(using: &random, scratch: directory.url)
                try entry.create(at: directory.path("pending", entry.name))
                entries.append(entry)
            }
            // When a child process restores it
            let run = try await RestoreChild.run(store: directory.store)
            guard let report = run.report else {
                // Then it never crashes; if it did, find and keep the inputs that crash it
                tally.crashedBatches += 1
                Issue.record("the restoring child died (\(run.ending)) on a batch of \(size) entries")
                crashers += try await Self.isolateCrashers(entries, in: directory)
                continue
            }
            // Then every entry is accounted for exactly once
            tally.add(entries: entries, report: report, directory: directory)
        }
        let seconds = Date().timeIntervalSince(started)
        print("corrupt-file fuzzing: \(tally.files) files in \(tally.batches) child processes, \(String(format: "%.1f", seconds)) s, seed \(Self.seed)")
        print("  kinds: " + tally.kinds.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))
        print("  outcomes: restored \(tally.restored) (good \(tally.goodRestored) of \(tally.good)), quarantined \(tally.quarantined), newer version left in place \(tally.newer), unknown type left in place \(tally.unknown); crashed children \(tally.crashedBatches)")
        print("  mutated files that still verified and restored: \(tally.mutatedRestored)")
        #expect(tally.files == Self.fileCount)
        #expect(crashers.isEmpty, "inputs that crashed the child, kept in Fixtures/FuzzCrashers: \(crashers)")
        #expect(tally.problems.isEmpty, "\(tally.problems.prefix(20))")
        #expect(tally.goodRestored == tally.good)
    }

    /// Restores each regular-file entry of a crashed batch alone and keeps the ones that crash.
    static func isolateCrashers(_ entries: [FuzzEntry], in directory: TemporaryDirectory) async throws -> [String] {
        let fixtures = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures/FuzzCrashers")
        var kept: [String] = []
        for entry in entries {
            guard let bytes = entry.bytes else { continue }
            let single = try TemporaryDirectory()
            try RecordStore(directory: single.store, configuration: .files).close()
            try bytes.write(to: URL(fileURLWithPath: single.path("pending", entry.name)))
            if try await RestoreChild.run(store: single.store).report == nil {
                try FileManager.default.createDirectory(at: fixtures, withIntermediateDirectories: true)
                let name = "\(entry.kind)-\(CRC32.checksum(of: bytes)).record"
                try bytes.write(to: fixtures.appendingPathComponent(name))
                kept.append(name)
            }
        }
        return kept
    }

    /// What the batches added up to.
    struct Tally {
        var files = 0
        var batches = 0
        var crashedBatches = 0
        var kinds: [String: Int] = [:]
        var good = 0
        var goodRestored = 0
        var restored = 0
        var mutatedRestored = 0
        var quarantined = 0
        var newer = 0
        var unknown = 0
        var problems: [String] = []

        mutating func add(entries: [FuzzEntry], report: RestoreChild.Report, directory: TemporaryDirectory) {
            batches += 1
            files += entries.count
            func file(_ id: String) -> String { StoreLayout.fileName(ofRecord: id) }
            let restoredNames = Set(report.restored.map(file))
            let quarantinedNames = Set(report.quarantined.map(\.name))
            let newerNames = Set(report.newerFormatVersions.map(\.name))
            let unknownNames = Set(report.unknownTypes.map(file))
            restored += restoredNames.count
            quarantined += quarantinedNames.count
            newer += newerNames.count
            unknown += unknownNames.count
            for entry in entries {
                kinds[entry.kind, default: 0] += 1
                let outcomes = [
                    restoredNames.contains(entry.name) ? FuzzEntry.Expectation.restored : nil,
                    quarantinedNames.contains(entry.name) ? .quarantined : nil,
                    newerNames.contains(entry.name) ? .leftAsNewer : nil,
                    unknownNames.contains(entry.name) ? .leftAsUnknownType : nil,
                ].compactMap { $0 }
                guard outcomes.count == 1, let outcome = outcomes.first else {
                    problems.append("\(entry.kind) \(entry.name): outcomes \(outcomes)")
                    continue
                }
                if entry.kind == "good" {
                    good += 1
                    if outcome == .restored { goodRestored += 1 }
                } else if outcome == .restored {
                    mutatedRestored += 1
                }
                if let expected = entry.expectation, expected != outcome {
                    problems.append("\(entry.kind) \(entry.name): expected \(expected), got \(outcome)")
                }
            }
            if report.quarantined.contains(where: { $0.reason.isEmpty }) { problems.append("a quarantined entry has no reason") }
            // On disk: quarantine holds each quarantined entry and its reason; the journal the
            // records the migration took (restored ones, and those of unknown types, untouched);
            // the pending area only what it left in place (newer format versions)
            let quarantineArea = (try? directory.names(in: "quarantine")) ?? []
            let expectedQuarantine = Set(quarantinedNames.flatMap { [$0, $0 + StoreLayout.reasonSuffix] })
            if quarantineArea != expectedQuarantine {
                problems.append("quarantine area differs from the report: \(quarantineArea.symmetricDifference(expectedQuarantine).prefix(5))")
            }
            let pendingArea = (try? directory.names(in: "pending")) ?? []
            let expectedPending = newerNames
            let stored = (try? RecordStore(directory: directory.store, access: .readOnly).loadPending().records.map { file($0.id) }) ?? []
            if Set(stored) != restoredNames.union(unknownNames) {
                problems.append("the journal differs from the report: \(Set(stored).symmetricDifference(restoredNames.union(unknownNames)).prefix(5))")
            }
            if pendingArea != expectedPending {
                problems.append("pending area differs from the report: \(pendingArea.symmetricDifference(expectedPending).prefix(5))")
            }
            if entries.count != restoredNames.count + quarantinedNames.count + newerNames.count + unknownNames.count {
                problems.append("a batch of \(entries.count) entries reported \(restoredNames.count) + \(quarantinedNames.count) + \(newerNames.count) + \(unknownNames.count)")
            }
        }
    }
}

/// Replays, in a child process, the inputs known to crash Foundation's property-list readers
/// (wrapped in valid record envelopes, as the record body and as the payload) and every input
/// the fuzzer ever kept in `Fixtures/FuzzCrashers/`.
@Suite("Fuzz crasher regressions", .timeLimit(.minutes(10)))   // the heavy workloads share two cores under Thread Sanitizer in CI: a limit that catches a hang, not a slow machine
struct FuzzCrasherRegressionTests {
    @Test func noKnownCrasherCrashesTheRestoringChild() async throws {
        let directory = try TemporaryDirectory()
        try RecordStore(directory: directory.store, configuration: .files).close()
        var inputs: [(label: String, bytes: Data)] = []
        for crafted in CraftedPropertyList.all {
            inputs.append(("body: \(crafted.name)", recordFile(body: crafted.body)))
        }
        var names: [String] = []
        for crafted in CraftedPropertyList.all {
            let name = FuzzEntry.recordName()
            var record = try FuzzEntry.goodRecord(named: name, index: 1)
            record.payload = crafted.body
            inputs.append(("payload: \(crafted.name)", try RecordFormat.encode(record)))
            names.append(name)
        }
        let kept = Bundle.module.url(forResource: "FuzzCrashers", withExtension: nil, subdirectory: "Fixtures")
        for name in (kept.flatMap { try? FileManager.default.contentsOfDirectory(atPath: $0.path) } ?? []).sorted() {
            inputs.append(("kept: \(name)", try Data(contentsOf: kept!.appendingPathComponent(name))))
        }
        var labels: [String: String] = [:]
        for (offset, input) in inputs.enumerated() {
            let name = offset >= CraftedPropertyList.all.count && offset - CraftedPropertyList.all.count < names.count
                ? names[offset - CraftedPropertyList.all.count] : FuzzEntry.recordName()
            try input.bytes.write(to: URL(fileURLWithPath: directory.path("pending", name)))
            labels[name] = input.label
        }
        // When a child restores them all, it exits normally and quarantines every one
        let run = try await RestoreChild.run(store: directory.store)
        let report = try #require(run.report, "the restoring child died: \(run.ending)")
        #expect(Set(report.quarantined.map(\.name)) == Set(labels.keys))
        #expect(report.restored.isEmpty)
    }
}

/// `crash-demo restore-report` as a child process.
enum RestoreChild {
    struct Report: Decodable {
        struct Entry: Decodable {
            var name: String
            var reason: String
        }

        var restored: [String]
        var quarantined: [Entry]
        var newerFormatVersions: [Entry]
        var unknownTypes: [String]
        var movedToFailedAfterCrashes: [String]
    }

    /// The report, or nil with how the child ended when it did not exit normally.
    static func run(store: URL) async throws -> (report: Report?, ending: String) {
        try await onDedicatedThread { () -> (Report?, String) in
            let output = store.deletingLastPathComponent().appendingPathComponent("report-\(UUID().uuidString).json")
            _ = FileManager.default.createFile(atPath: output.path, contents: nil)
            let handle = try FileHandle(forWritingTo: output)
            defer { try? handle.close() }
            let child = try ChildApp.launch(["restore-report", "--store", store.path], output: handle)
            try ChildApp.waitForExit(child, timeout: 120)
            let ending = child.terminationReason == .uncaughtSignal ? "signal \(child.terminationStatus)" : "exit \(child.terminationStatus)"
            guard child.terminationReason == .exit, child.terminationStatus == 0 else { return (nil, ending) }
            let data = try Data(contentsOf: output)
            // The JSON is the last line; standard error may hold log lines before it.
            let line = data.split(separator: UInt8(ascii: "\n")).last ?? data
            return (try JSONDecoder().decode(Report.self, from: Data(line)), ending)
        }
    }
}

/// One entry placed in `pending/`: how it was made, and what restoring it must do.
struct FuzzEntry {
    enum Expectation: Equatable {
        case restored, quarantined, leftAsNewer, leftAsUnknownType
    }

    var kind: String
    var name: String
    /// What must happen to it; nil when any outcome is fine (a mutation that may still verify).
    var expectation: Expectation?
    /// The bytes of a regular file; nil for directories, links and FIFOs.
    var bytes: Data?
    var special: Special?

    enum Special {
        case directory, symbolicLink(String), danglingLink, fifo, oversized
    }

    func create(at path: String) throws {
        switch special {
        case .none:
            try bytes!.write(to: URL(fileURLWithPath: path))
        case .directory?:
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
        case .symbolicLink(let target)?:
            try FileManager.default.createSymbolicLink(atPath: path, withDestinationPath: target)
        case .danglingLink?:
            try FileManager.default.createSymbolicLink(atPath: path, withDestinationPath: path + ".missing")
        case .fifo?:
            guard mkfifo(path, 0o600) == 0 else { throw SystemCallError("mkfifo", path: path, code: errno) }
        case .oversized?:
            // Sparse: one byte over the cap without writing a megabyte.
            guard FileManager.default.createFile(atPath: path, contents: nil),
                  truncate(path, off_t(RecordFormat.defaultMaximumRecordSize + 1)) == 0 else {
                throw SystemCallError("truncate", path: path, code: errno)
            }
        }
    }

    static func recordName() -> String { StoreLayout.fileName(ofRecord: UUID().uuidString) }

    /// A valid record of the demo's upload type, stored under `name`.
    static func goodRecord(named name: String, index: Int, type: String = "demo.upload") throws -> OperationRecord {
        let job = DemoUploadJob(index: index, behaviour: "succeeds", attemptMilliseconds: 30)
        return OperationRecord(
            id: StoreLayout.recordIdentifier(fromFileName: name)!,
            typeIdentifier: type,
            payload: try RecordFormat.encodePayload(job),
            enqueueSequence: UInt64(index + 1),
            tags: ["fuzz"],
            numberOfRetries: index % 3,
            numberOfAttempts: index % 4
        )
    }

    static func flipBits(_ data: inout Data, count: Int, in range: Range<Int>? = nil, using random: inout SeededGenerator) {
        let range = range ?? 0..<data.count
        guard !range.isEmpty else { return }
        for _ in 0..<count {
            data[data.startIndex + Int.random(in: range, using: &random)] ^= UInt8(1) << UInt8.random(in: 0..<8, using: &random)
        }
    }

    static func body(of file: Data) -> Data {
        Data(file.dropFirst(RecordFormat.headerSize))
    }

    /// What a record file with damaged bytes must come to: restored when the damage undid
    /// itself, left in place when an intact magic is followed by a version above 1 (a newer
    /// format), otherwise quarantined (magic, version 0, reserved bits, length or checksum).
    static func expectation(of data: Data, original: Data) -> Expectation {
        if data == original { return .restored }
        let version = Int(data[8]) << 8 | Int(data[9])
        return data.starts(with: RecordFormat.magic) && version > 1 ? .leftAsNewer : .quarantined
    }

    /// A random entry: about one in five good, the rest malformed in one of many ways.
    static func make(using random: inout SeededGenerator, scratch: URL) throws -> FuzzEntry {
        let name = recordName()
        let index = Int.random(in: 0..<1_000_000, using: &random)
        let good = try RecordFormat.encode(goodRecord(named: name, index: index))
        func entry(_ kind: String, _ expectation: Expectation?, _ bytes: Data) -> FuzzEntry {
            FuzzEntry(kind: kind, name: name, expectation: expectation, bytes: bytes)
        }
        switch Int.random(in: 0..<100, using: &random) {
        case 0..<20:
            return entry("good", .restored, good)
        case 20..<32:
            var data = good
            flipBits(&data, count: Int.random(in: 1...8, using: &random), using: &random)
            return entry("bit-flip", expectation(of: data, original: good), data)
        case 32..<40:
            return entry("truncated", .quarantined, Data(good.prefix(Int.random(in: 0..<good.count, using: &random))))
        case 40..<44:
            var data = good
            data.append(contentsOf: (0..<Int.random(in: 1...64, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) })
            return entry("extended", .quarantined, data)
        case 44..<50:
            var data = good
            let start = Int.random(in: 0..<data.count, using: &random)
            for offset in start..<min(data.count, start + Int.random(in: 1...16, using: &random)) {
                data[offset] = UInt8.random(in: 0...255, using: &random)
            }
            return entry("overwritten-run", expectation(of: data, original: good), data)
        case 50..<54:
            var data = good
            switch Int.random(in: 0..<5, using: &random) {
            case 0:
                let version = UInt16.random(in: 2...UInt16.max, using: &random)
                data[8] = UInt8(version >> 8)
                data[9] = UInt8(version & 0xFF)
                return entry("newer-version", .leftAsNewer, data)
            case 1:
                data[8] = 0
                data[9] = 0
                return entry("version-0", .quarantined, data)
            case 2:
                data[10 + Int.random(in: 0...1, using: &random)] |= 1 << UInt8.random(in: 0..<8, using: &random)
                return entry("reserved-bits", .quarantined, data)
            case 3:
                data[12 + Int.random(in: 0...3, using: &random)] ^= 1 << UInt8.random(in: 0..<8, using: &random)
                return entry("wrong-length", .quarantined, data)
            default:
                data[16 + Int.random(in: 0...3, using: &random)] ^= 1 << UInt8.random(in: 0..<8, using: &random)
                return entry("wrong-checksum", .quarantined, data)
            }
        case 54..<66:
            // Structure-aware: the envelope body mutated, with a correct length and checksum.
            var body = body(of: good)
            flipBits(&body, count: Int.random(in: 1...6, using: &random), using: &random)
            return entry("body-flip-valid-crc", nil, recordFile(body: body))
        case 66..<70:
            let crafted = CraftedPropertyList.all.randomElement(using: &random)!
            return entry("crafted-body", .quarantined, recordFile(body: crafted.body))
        case 70..<80:
            // The record is intact; its payload bytes are mutated (they reach the payload decoder).
            var record = try goodRecord(named: name, index: index)
            flipBits(&record.payload, count: Int.random(in: 1...6, using: &random), using: &random)
            return entry("payload-flip", nil, try RecordFormat.encode(record))
        case 80..<84:
            var record = try goodRecord(named: name, index: index)
            record.payload = CraftedPropertyList.all.randomElement(using: &random)!.body
            return entry("crafted-payload", .quarantined, try RecordFormat.encode(record))
        case 84..<86:
            return entry("unknown-type", .leftAsUnknownType, try RecordFormat.encode(goodRecord(named: name, index: index, type: "demo.not-registered")))
        case 86..<88:
            let other = try RecordFormat.encode(goodRecord(named: recordName(), index: index))
            return entry("identifier-mismatch", .quarantined, other)
        case 88..<90:
            return FuzzEntry(kind: "unexpected-name", name: "upload-\(UUID().uuidString.prefix(8)).plist", expectation: .quarantined, bytes: good)
        case 90..<92:
            return entry("empty", .quarantined, Data())
        case 92..<94:
            let garbage = Data((0..<Int.random(in: 1...2_000, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) })
            return entry("random-bytes", .quarantined, garbage)
        default:
            let special: Special
            let kind: String
            switch Int.random(in: 0..<5, using: &random) {
            case 0: (special, kind) = (.directory, "directory")
            case 1:
                let target = scratch.appendingPathComponent("link-target-\(UUID().uuidString).record")
                try good.write(to: target)
                (special, kind) = (.symbolicLink(target.path), "symbolic-link")
            case 2: (special, kind) = (.danglingLink, "dangling-link")
            case 3: (special, kind) = (.fifo, "fifo")
            default: (special, kind) = (.oversized, "oversized")
            }
            return FuzzEntry(kind: kind, name: name, expectation: .quarantined, bytes: nil, special: special)
        }
    }
}
