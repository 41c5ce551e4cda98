import CrashHarness
import Foundation
import Testing
@testable import PersistentOperations

/// Seeded fuzzing of journal segments: random segments, damaged by bit flips, truncation,
/// garbage appended, frames cut in half and random bytes written over them, one to three
/// damages each.
///
/// Every byte of a damaged segment remembers where it came from in the original, so the test
/// knows which frames are intact (every byte present, unchanged and in its place relative to
/// the others) and demands every one of them back. The only other frames allowed are
/// reassembled ones: a frame that starts with an original frame's own first byte and whose
/// kind and body equal that frame's, its missing bytes replaced by identical ones from
/// elsewhere (a frame of zeros cut in half and followed by zeros), or a later frame moved up
/// over an earlier one cut short whose header began the same way (its last byte still its
/// own). Such a frame is byte for byte what was written, in its own place in the order. `PERSISTENT_OPERATIONS_JOURNAL_FUZZ_COUNT`
/// and `PERSISTENT_OPERATIONS_JOURNAL_FUZZ_SEED` change the number of cases and the seed.
@Suite("Journal segment fuzzing", .timeLimit(.minutes(10)))   // the heavy workloads share two cores under Thread Sanitizer in CI: a limit that catches a hang, not a slow machine
struct JournalSegmentFuzzTests {
    static let environment = ProcessInfo.processInfo.environment
    static let caseCount = environment["PERSISTENT_OPERATIONS_JOURNAL_FUZZ_COUNT"].flatMap(Int.init) ?? 12_000
    static let seed = environment["PERSISTENT_OPERATIONS_JOURNAL_FUZZ_SEED"].flatMap(UInt64.init) ?? 0x10_0F22

    enum Damage: String, CaseIterable {
        case bitFlips, truncation, garbageAppended, frameCutInHalf, randomBytes
    }

    /// A damaged segment: each byte with its offset in the original, or `nil` when it is not
    /// the original's byte there.
    struct Damaged {
        var bytes: [UInt8]
        var origins: [Int?]

        init(_ original: Data) {
            bytes = [UInt8](original)
            origins = Array(0..<original.count)
        }

        mutating func apply(_ damage: Damage, frames: [JournalSegmentScan.LocatedFrame], using random: inout SeededGenerator) {
            switch damage {
            case .bitFlips:
                guard !bytes.isEmpty else { return }
                // Distinct bytes: flipping one bit twice would restore it.
                var flipped: Set<Int> = []
                for _ in 0..<Int.random(in: 1...4, using: &random) {
                    let index = Int.random(in: 0..<bytes.count, using: &random)
                    guard flipped.insert(index).inserted else { continue }
                    bytes[index] ^= 1 << UInt8.random(in: 0...7, using: &random)
                    origins[index] = nil
                }
            case .truncation:
                let count = Int.random(in: 0...bytes.count, using: &random)
                bytes.removeLast(bytes.count - count)
                origins.removeLast(origins.count - count)
            case .garbageAppended:
                let count = Int.random(in: 1...200, using: &random)
                var garbage = (0..<count).map { _ in UInt8.random(in: 0...255, using: &random) }
                if Bool.random(using: &random) {
                    // Start the garbage like a frame, so the reader has to check further.
                    garbage.replaceSubrange(0..<min(4, count), with: JournalFrame.marker.prefix(count))
                }
                bytes += garbage
                origins += [Int?](repeating: nil, count: count)
            case .frameCutInHalf:
                // One frame, where it still is, loses its first or its second half.
                guard let frame = frames.randomElement(using: &random),
                      let start = origins.firstIndex(of: frame.offset) else { return }
                let end = min(start + frame.frame.size, bytes.count)
                let middle = start + (end - start) / 2
                let removed = Bool.random(using: &random) ? start..<middle : middle..<end
                bytes.removeSubrange(removed)
                origins.removeSubrange(removed)
            case .randomBytes:
                guard !bytes.isEmpty else { return }
                let start = Int.random(in: 0..<bytes.count, using: &random)
                let end = min(bytes.count, start + Int.random(in: 1...64, using: &random))
                for index in start..<end {
                    let byte = UInt8.random(in: 0...255, using: &random)
                    if byte != bytes[index] {
                        bytes[index] = byte
                        origins[index] = nil
                    }
                }
            }
        }

        /// Where each frame of the original now starts, for the frames whose bytes are all
        /// there, unchanged and contiguous.
        func intactFrames(of frames: [JournalSegmentScan.LocatedFrame]) -> [JournalSegmentScan.LocatedFrame] {
            var positions: [Int: Int] = [:]
            for (position, origin) in origins.enumerated() {
                if let origin { positions[origin] = position }
            }
            return frames.compactMap { frame in
                guard let start = positions[frame.offset], start + frame.frame.size <= origins.count else { return nil }
                for step in 0..<frame.frame.size where origins[start + step] != frame.offset + step {
                    return nil
                }
                return .init(frame: frame.frame, offset: start)
            }
        }

        /// Whether the segment still starts with `original`'s header bytes. By value, not by
        /// origin: a cut inside the header followed by appended bytes that happen to be the
        /// ones cut (its last byte, say, which is 1 in 256) puts back the very header.
        func hasHeader(of original: Data) -> Bool {
            bytes.count >= JournalSegment.headerSize && bytes.prefix(JournalSegment.headerSize).elementsEqual(original.prefix(JournalSegment.headerSize))
        }
    }

    /// A random segment: 0 to 12 frames of random kinds; bodies of 0 to 300 bytes, some ending
    /// with the frame marker, some all zeros.
    static func makeSegment(using random: inout SeededGenerator) throws -> SegmentSample {
        var sample = SegmentSample(salt: UInt32.random(in: 0...UInt32.max, using: &random), number: random.next())
        for _ in 0..<Int.random(in: 0...12, using: &random) {
            var body = Data((0..<Int.random(in: 0...300, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) })
            switch Int.random(in: 0..<6, using: &random) {
            case 0: body.append(contentsOf: JournalFrame.marker)
            case 1: body = Data(repeating: 0, count: body.count)
            default: break
            }
            let kind = JournalFrame.Kind.allCases.randomElement(using: &random)!
            try sample.append(kind == .batch ? .batch([body, body.prefix(7)]) : JournalFrame(kind: kind, body: body))
        }
        return sample
    }

    @Test func everyIntactFrameOfADamagedSegmentIsFoundAndNothingElse() async throws {
        // (Minutes of work under Thread Sanitizer: on a thread of its own, not one of the few
        // threads that run every test, whose other tests would wait out their time limits)
        let outcome = try await onDedicatedThread { try Self.fuzz() }
        print(outcome.summary)
        #expect(Self.caseCount >= 10_000 || Self.environment["PERSISTENT_OPERATIONS_JOURNAL_FUZZ_COUNT"] != nil)
        #expect(outcome.failures.isEmpty, "\(outcome.failures)")
        #expect(outcome.framesFound == outcome.framesIntact + outcome.framesReassembled)
    }

    /// Scans ``caseCount`` randomly damaged segments; what was found, and the first 20 cases
    /// whose scan was wrong.
    static func fuzz() throws -> (summary: String, failures: [String], framesFound: Int, framesIntact: Int, framesReassembled: Int) {
        var random = SeededGenerator(seed: Self.seed)
        var counts: [Damage: Int] = [:]
        var failures: [String] = []
        var framesWritten = 0
        var framesIntact = 0
        var framesFound = 0
        var framesReassembled = 0
        var regions = 0
        var tails = 0
        for index in 0..<Self.caseCount {
            // Given a random segment, damaged one to three times
            let sample = try Self.makeSegment(using: &random)
            var damaged = Damaged(sample.bytes)
            var applied: [Damage] = []
            for _ in 0..<Int.random(in: 1...3, using: &random) {
                let damage = Damage.allCases.randomElement(using: &random)!
                damaged.apply(damage, frames: sample.frames, using: &random)
                applied.append(damage)
                counts[damage, default: 0] += 1
            }
            // When it is scanned (a trap here would end the test run)
            let scan = try JournalSegment.scan(Data(damaged.bytes))
            // Then exactly the intact frames come back, where they now are
            let intact = damaged.intactFrames(of: sample.frames)
            framesWritten += sample.frames.count
            framesIntact += intact.count
            framesFound += scan.frames.count
            regions += scan.corruptRegions.count
            tails += scan.tornTail == nil ? 0 : 1
            var problems: [String] = []
            let missing = intact.filter { !scan.frames.contains($0) }
            if !missing.isEmpty {
                problems.append("intact frames at \(missing.map(\.offset)) not found; found \(scan.frames.map(\.offset))")
            }
            for found in scan.frames where !intact.contains(found) {
                let original = damaged.origins[found.offset].flatMap { origin in sample.frames.first { $0.offset == origin } }
                if original?.frame == found.frame || Self.isWrittenFrameMovedUp(found, in: damaged, of: sample) {
                    framesReassembled += 1
                } else {
                    problems.append("a frame found at \(found.offset) is neither intact nor a reassembled original")
                }
            }
            if (scan.header != nil) != damaged.hasHeader(of: sample.bytes) {
                problems.append("header read \(scan.header != nil), intact \(damaged.hasHeader(of: sample.bytes))")
            }
            // And header, frames, regions and tails cover every byte once, in order
            var pieces: [Range<Int>] = scan.header == nil ? [] : [0..<JournalSegment.headerSize]
            pieces += scan.frames.map(\.range) + scan.corruptRegions.map(\.range) + (scan.tornTail.map { [$0.range] } ?? []) + (scan.unusedTail.map { [$0.range] } ?? [])
            pieces.sort { $0.lowerBound < $1.lowerBound }
            var covered = 0
            for piece in pieces where !piece.isEmpty {
                if piece.lowerBound != covered { problems.append("bytes \(covered)..<\(piece.lowerBound) unaccounted or counted twice") }
                covered = piece.upperBound
            }
            if covered != damaged.bytes.count { problems.append("covered \(covered) of \(damaged.bytes.count) bytes") }
            if !problems.isEmpty, failures.count < 20 {
                failures.append("case \(index) (\(applied.map(\.rawValue))): " + problems.joined(separator: "; "))
            }
        }
        let summary = "journal segment fuzzing: \(caseCount) cases, seed \(seed); damages " + Damage.allCases.map { "\($0.rawValue) \(counts[$0, default: 0])" }.joined(separator: ", ")
            + "\n  frames written \(framesWritten), intact \(framesIntact), found \(framesFound) (reassembled \(framesReassembled)); corrupt regions \(regions), torn tails \(tails)"
        return (summary, failures, framesFound, framesIntact, framesReassembled)
    }

    /// Whether `found` is byte for byte a later frame of `sample` that damage moved up, not
    /// intact by its bytes' origins: its first bytes now come from an earlier frame cut short,
    /// whose header began the same way (same marker, salt and kind), and the rest from the
    /// frame itself — a frame that was written, in its order, none other not found.
    static func isWrittenFrameMovedUp(_ found: JournalSegmentScan.LocatedFrame, in damaged: Damaged, of sample: SegmentSample) -> Bool {
        guard let origin = damaged.origins[found.offset], found.range.upperBound <= damaged.bytes.count else { return false }
        let bytes = damaged.bytes[found.range]
        return sample.frames.contains { written in
            written.offset > origin && written.frame == found.frame
                && sample.bytes[written.range].elementsEqual(bytes)
                && damaged.origins[found.range.upperBound - 1] == written.range.upperBound - 1
        }
    }

    @Test func theIntactFrameCheckCanFail() throws {
        // Given a segment whose bytes are unchanged
        var random = SeededGenerator(seed: 1)
        var sample = try Self.makeSegment(using: &random)
        while sample.frames.count < 2 { sample = try Self.makeSegment(using: &random) }
        let damaged = Damaged(sample.bytes)
        // When the scan's answer drops a frame, Then the fuzzing check tells
        #expect(damaged.intactFrames(of: sample.frames) == sample.frames)
        #expect(damaged.intactFrames(of: sample.frames) != Array(sample.frames.dropFirst()))
        // And a flipped bit makes its frame not intact
        var flipped = damaged
        flipped.apply(.bitFlips, frames: sample.frames, using: &random)
        let changed = Set(flipped.origins.indices.filter { flipped.origins[$0] == nil })
        let hit = sample.frames.filter { frame in changed.contains { frame.range.contains($0) } }
        #expect(flipped.intactFrames(of: sample.frames).count == sample.frames.count - hit.count)
    }
}
