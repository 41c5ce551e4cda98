import CrashHarness
import Foundation
import Testing
@testable import PersistentOperations

/// A segment built frame by frame, remembering where each frame went.
struct SegmentSample {
    var salt: UInt32
    var bytes: Data
    var frames: [JournalSegmentScan.LocatedFrame] = []

    init(salt: UInt32 = 0x5A17_0001, number: UInt64 = 1) {
        self.salt = salt
        bytes = JournalSegment.header(salt: salt, number: number)
    }

    init(frames: [JournalFrame], salt: UInt32 = 0x5A17_0001) throws {
        self.init(salt: salt)
        for frame in frames { try append(frame) }
    }

    mutating func append(_ frame: JournalFrame) throws {
        let offset = bytes.count
        try frame.append(to: &bytes, salt: salt)
        frames.append(.init(frame: frame, offset: offset))
    }

    /// A frame of each kind, with bodies of several shapes (one holds frame-marker bytes).
    static func everyKind() throws -> SegmentSample {
        var record = Data(try RecordFormat.encode(try makeRecord(index: 1)))
        record.append(contentsOf: JournalFrame.marker)
        let bodies = [Data(), Data("9E3C6F2A-0000-4000-8000-000000000001".utf8), record, Data(repeating: 0, count: 100)]
        var frames: [JournalFrame] = []
        for (index, kind) in JournalFrame.Kind.allCases.enumerated() {
            frames.append(JournalFrame(kind: kind, body: bodies[index % bodies.count]))
        }
        frames.append(.batch([record, Data(), Data([1, 2, 3])]))
        return try SegmentSample(frames: frames)
    }
}

@Suite("Journal segments", .timeLimit(.minutes(1)))
struct JournalSegmentTests {
    @Test func everyFrameKindReadsBackAsWritten() throws {
        // Given a segment with a frame of every kind, bodies empty, small, record-sized and zeros
        let sample = try SegmentSample.everyKind()
        // When it is scanned
        let scan = try JournalSegment.scan(sample.bytes)
        // Then every frame comes back, in order, at its offset, and nothing is damaged
        #expect(scan.header == JournalSegment.Header(formatVersion: 1, salt: sample.salt, number: 1))
        #expect(scan.frames == sample.frames)
        #expect(Set(scan.frames.map(\.frame.kind)) == Set(JournalFrame.Kind.allCases))
        #expect(scan.corruptRegions.isEmpty)
        #expect(scan.tornTail == nil)
        #expect(scan.validEnd(segmentSize: sample.bytes.count) == sample.bytes.count)
    }

    @Test func anEmptySegmentHasNoFramesAndNoDamage() throws {
        let scan = try JournalSegment.scan(JournalSegment.header(salt: 7, number: 42))
        #expect(scan.header?.number == 42)
        #expect(scan.frames.isEmpty && scan.corruptRegions.isEmpty && scan.tornTail == nil)
    }

    @Test func aBatchFrameSplitsIntoItsParts() throws {
        let parts = [Data("first".utf8), Data(), Data(repeating: 0xF9, count: 300)]
        #expect(try JournalFrame.batch(parts).batchParts() == parts)
        #expect(try JournalFrame.batch([]).batchParts() == [])
    }

    @Test(arguments: [
        ("too short", Data([0, 0])),
        ("count larger than the bytes", Data([0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0])),
        ("part past the end", Data([0, 0, 0, 1, 0, 0, 0, 9, 1, 2])),
        ("bytes after the last part", Data([0, 0, 0, 1, 0, 0, 0, 1, 7, 8])),
    ])
    func aMalformedBatchBodyThrowsInsteadOfReadingPastIt(label: String, body: Data) throws {
        let error = #expect(throws: PersistenceError.self, "\(label)") {
            try JournalFrame(kind: .batch, body: body).batchParts()
        }
        #expect(error?.code == .corruptRecord)
        #expect(throws: PersistenceError.self) { try JournalFrame(kind: .put, body: Data()).batchParts() }
    }

    @Test func aFrameOverTheSizeCapIsRefusedOnWriteAndIsDamageOnRead() throws {
        // Given a cap of 1,024 bytes a frame
        let cap = 1_024
        let fits = JournalFrame(kind: .put, body: Data(repeating: 1, count: cap - JournalFrame.headerSize))
        let tooLarge = JournalFrame(kind: .put, body: Data(repeating: 2, count: cap - JournalFrame.headerSize + 1))
        // When frames are written under it, then Then the one over it throws a clear error
        var segment = JournalSegment.header(salt: 1, number: 1)
        try fits.append(to: &segment, salt: 1, maximumSize: cap)
        let before = segment
        let error = #expect(throws: PersistenceError.self) { try tooLarge.append(to: &segment, salt: 1, maximumSize: cap) }
        #expect(error?.code == .recordTooLarge)
        #expect(error?.message.contains("maximum frame size of 1024 bytes") == true)
        #expect(segment == before)
        // And a frame over the reader's cap is damage, its neighbours kept
        try tooLarge.append(to: &segment, salt: 1)
        try fits.append(to: &segment, salt: 1)
        let scan = try JournalSegment.scan(segment, maximumFrameSize: cap)
        #expect(scan.frames.map(\.frame) == [fits, fits])
        #expect(scan.corruptRegions.map(\.count) == [tooLarge.size])
        #expect(scan.corruptRegions.first?.reason.contains("maximum frame size") == true)
    }

    @Test func aTornTailAtEveryByteOfTheLastFrameIsCutAtItsStart() throws {
        // Given a segment of frames
        let sample = try SegmentSample.everyKind()
        let last = try #require(sample.frames.last)
        var random = SeededGenerator(seed: 22)
        for cut in last.offset..<last.range.upperBound {
            for filling in ["truncated", "zeros", "garbage"] {
                // When the last frame is torn at `cut`: the file ends there, or its rest is
                // zeros or garbage (what a file system may leave after a power cut)
                var torn = sample.bytes.prefix(cut)
                let rest = last.range.upperBound - cut
                switch filling {
                case "zeros": torn.append(Data(count: rest))
                case "garbage": torn.append(Data((0..<rest).map { _ in UInt8.random(in: 0...255, using: &random) }))
                default: break
                }
                let scan = try JournalSegment.scan(Data(torn))
                // Then every earlier frame is kept and the tail starts at the torn frame
                #expect(scan.frames == Array(sample.frames.dropLast()), "cut at \(cut), \(filling)")
                #expect(scan.corruptRegions.isEmpty, "cut at \(cut), \(filling)")
                if cut == last.offset, filling == "truncated" {
                    #expect(scan.tornTail == nil)
                } else if cut == last.offset, filling == "zeros" {
                    // Nothing of the frame was written: zeros where no frame began are unused space
                    #expect(scan.tornTail == nil)
                    #expect(scan.unusedTail?.offset == last.offset && scan.unusedTail?.count == rest)
                } else {
                    #expect(scan.tornTail?.offset == last.offset, "cut at \(cut), \(filling)")
                    #expect(scan.tornTail?.count == torn.count - last.offset)
                }
            }
        }
    }

    @Test func zerosAfterTheFramesAreUnusedSpaceOnlyWhenNothingButZerosFollows() throws {
        // Given a segment of frames followed by zeros, of lengths around the eight bytes the
        // scan reads at a time, and as long as the writer fills ahead
        let sample = try SegmentSample.everyKind()
        for zeros in Array(1...17) + [65_535, 65_536] {
            let filled = sample.bytes + Data(count: zeros)
            // Then all of them are unused space
            let scan = try JournalSegment.scan(filled)
            #expect(scan.frames == sample.frames, "\(zeros) zeros")
            #expect(scan.tornTail == nil && scan.corruptRegions.isEmpty, "\(zeros) zeros")
            #expect(scan.unusedTail?.offset == sample.bytes.count && scan.unusedTail?.count == zeros, "\(zeros) zeros")
            // But one byte that is not zero, anywhere among them, makes them a torn tail
            for position in Set([0, zeros / 2, zeros - 1]) {
                var damaged = filled
                damaged[sample.bytes.count + position] = 0x01
                let scan = try JournalSegment.scan(damaged)
                #expect(scan.frames == sample.frames, "\(zeros) zeros, byte at \(position)")
                #expect(scan.unusedTail == nil, "\(zeros) zeros, byte at \(position)")
                #expect(scan.tornTail?.offset == sample.bytes.count && scan.tornTail?.count == zeros, "\(zeros) zeros, byte at \(position)")
            }
        }
    }

    @Test func aSegmentTornInsideItsHeaderIsAllTail() throws {
        let header = JournalSegment.header(salt: 3, number: 3)
        for cut in 0..<header.count {
            let scan = try JournalSegment.scan(header.prefix(cut))
            #expect(scan.header == nil && scan.frames.isEmpty && scan.corruptRegions.isEmpty)
            #expect(scan.tornTail?.offset == (cut == 0 ? nil : 0))
        }
    }

    @Test func aCorruptFrameInTheMiddleIsSkippedAndEveryNeighbourKept() throws {
        // Given a segment of frames
        let sample = try SegmentSample.everyKind()
        for (index, damaged) in sample.frames.enumerated().dropLast() {
            for position in damaged.range {
                // When one byte of a frame in the middle changes (marker, salt, kind, reserved
                // bits, length, either checksum, or the body)
                var bytes = sample.bytes
                bytes[position] ^= 0x10
                let scan = try JournalSegment.scan(bytes)
                // Then exactly that frame's bytes are a corrupt region, and every other frame is kept
                var expected = sample.frames
                expected.remove(at: index)
                #expect(scan.frames == expected, "frame \(index), byte \(position - damaged.offset)")
                #expect(scan.corruptRegions.map(\.range) == [damaged.range], "frame \(index), byte \(position - damaged.offset)")
                #expect(scan.tornTail == nil)
            }
        }
    }

    @Test func aCorruptLengthCannotHideTheFramesAfterIt() throws {
        // Given a frame whose length field claims the rest of the segment, checksums recomputed
        // except the header check
        let sample = try SegmentSample.everyKind()
        var bytes = sample.bytes
        let first = sample.frames[0].offset
        bytes[first + 12] = 0
        bytes[first + 13] = 0
        bytes[first + 14] = 0x7F
        bytes[first + 15] = 0xFF
        // When scanned, Then the frame is damage and every later frame is found
        let scan = try JournalSegment.scan(bytes)
        #expect(scan.frames == Array(sample.frames.dropFirst()))
        #expect(scan.corruptRegions.map(\.range) == [sample.frames[0].range])
        #expect(scan.corruptRegions.first?.reason == "frame header checksum mismatch")
    }

    @Test func aDamagedSegmentHeaderLosesNoFrame() throws {
        let sample = try SegmentSample.everyKind()
        for position in 0..<JournalSegment.headerSize {
            var bytes = sample.bytes
            bytes[position] ^= 0x01
            let scan = try JournalSegment.scan(bytes)
            #expect(scan.header == nil, "header byte \(position)")
            #expect(scan.frames == sample.frames, "header byte \(position)")
            #expect(scan.corruptRegions.map(\.range) == [0..<JournalSegment.headerSize], "header byte \(position)")
            #expect(scan.corruptRegions.first?.reason.hasPrefix("segment header:") == true)
        }
    }

    @Test func framesOfAnotherSegmentAreDamageNotRecords() throws {
        // Given a file reused for a new segment (another salt) over the remains of an older,
        // longer one, and a frame of another segment copied into the middle
        let old = try SegmentSample(frames: (0..<6).map { JournalFrame(kind: .put, body: Data(repeating: UInt8($0), count: 50)) }, salt: 1)
        var new = try SegmentSample(frames: [JournalFrame(kind: .remove, body: Data("a".utf8))], salt: 2)
        let foreign = try JournalFrame(kind: .put, body: Data("foreign".utf8)).encoded(salt: 1)
        new.bytes.append(foreign)
        try new.append(JournalFrame(kind: .remove, body: Data("b".utf8)))
        var file = new.bytes
        file.append(old.bytes.suffix(from: new.bytes.count))
        // When scanned
        let scan = try JournalSegment.scan(file)
        // Then only the new segment's frames count; the foreign frame is a corrupt region and
        // the old remains are the tail
        #expect(scan.frames == new.frames)
        #expect(scan.corruptRegions.map(\.count) == [foreign.count])
        #expect(scan.corruptRegions.first?.reason.contains("another segment") == true)
        #expect(scan.tornTail?.offset == new.bytes.count)
    }

    @Test func aNewerFormatVersionIsRefusedNotScanned() throws {
        var header = [UInt8](JournalSegment.header(salt: 1, number: 1).prefix(28))
        header[9] = 2
        header.appendBigEndian(UInt64(CRC32.checksum(of: header)), width: 4)
        let error = #expect(throws: PersistenceError.self) { try JournalSegment.scan(Data(header)) }
        #expect(error?.code == .unsupportedFormatVersion)
    }

    @Test func aFrameOfAnUnknownKindIsDamageOfExactlyItsBytes() throws {
        // Given a verified frame whose kind byte no version 1 writer uses
        let sample = try SegmentSample.everyKind()
        var bytes = [UInt8](sample.bytes)
        let victim = sample.frames[1]
        bytes[victim.offset + 8] = 0xEE
        let headerCheck = CRC32.checksum(of: bytes[victim.offset..<(victim.offset + 16)])
        let frameCheck = CRC32.checksum(of: bytes[(victim.offset + 24)..<victim.range.upperBound], continuing: headerCheck)
        var checks: [UInt8] = []
        checks.appendBigEndian(UInt64(headerCheck), width: 4)
        checks.appendBigEndian(UInt64(frameCheck), width: 4)
        bytes.replaceSubrange((victim.offset + 16)..<(victim.offset + 24), with: checks)
        // When scanned, Then it is reported, and its neighbours kept
        let scan = try JournalSegment.scan(Data(bytes))
        var expected = sample.frames
        expected.remove(at: 1)
        #expect(scan.frames == expected)
        #expect(scan.corruptRegions.map(\.range) == [victim.range])
        #expect(scan.corruptRegions.first?.reason == "unknown frame kind 238")
    }

    @Test func crcEightBytesAtATimeEqualsOneByteAtATime() {
        // Contiguous bytes take the eight-at-a-time path, a plain sequence the byte path.
        var random = SeededGenerator(seed: 32)
        for length in 0..<300 {
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &random) }
            #expect(CRC32.checksum(of: bytes) == CRC32.checksum(of: AnySequence(bytes)), "\(length) bytes")
            #expect(CRC32.checksum(of: Data(bytes)) == CRC32.checksum(of: AnySequence(bytes)))
        }
    }

    @Test func crcContinuationEqualsTheChecksumOfBothRuns() {
        let whole = Array("123456789".utf8)
        #expect(CRC32.checksum(of: whole) == 0xCBF4_3926)
        for split in 0...whole.count {
            #expect(CRC32.checksum(of: whole[split...], continuing: CRC32.checksum(of: whole[..<split])) == 0xCBF4_3926)
        }
    }
}
