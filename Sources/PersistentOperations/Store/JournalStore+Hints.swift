import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// Hint files
// ==========
//
// Each sealed segment gets a hint file (`<segment>.hint`, see `JournalHint.swift`): what its
// frames do to the index, without payloads. An open applies a segment's hint instead of
// reading and verifying the segment; a restore takes plain records' fields from it instead of
// reading them. Segments are the truth and hints are derived from them:
//
// - a hint is made from the segment's bytes as read back after the segment was sealed and
//   flushed (the same read and verification an open makes), and only when every byte of it
//   verified and every record decoded; it is written under a temporary name and renamed,
//   unflushed: a power cut can leave it torn or absent, and then the segment is read;
// - an open uses a hint only for a segment that is not the last, whose header carries the
//   hint's salt and number, and after whose hinted end no frame of that segment begins (so a
//   segment appended to after its hint was made is read whole); a hint that fails a check is
//   ignored, and the segment is read and hinted again;
// - a hint goes with its segment (compaction, the removal of replaced segments), and an open
//   removes hints whose segment is gone and the hint of the segment it appends to;
// - hints are made on the compaction queue, off the writers' path: after each segment is
//   sealed, and after an open for the sealed segments that had none.
//
// A payload is not read at open then, so damage to a record's bytes after its segment was
// hinted is found when its operation is built (every record's own checksum is verified then),
// and the record is quarantined as at open.

extension JournalSegmentName {
    /// The name of the segment's hint file.
    var hintFileName: String {
        String(fileName.dropLast(Self.fileExtension.count)) + JournalHint.fileExtension
    }

    /// The segment whose hint file is named `hintFileName`, nil for any other name.
    init?(hintFileName: String) {
        let suffix = "." + JournalHint.fileExtension
        guard hintFileName.hasSuffix(suffix) else { return nil }
        self.init(fileName: String(hintFileName.dropLast(JournalHint.fileExtension.count)) + Self.fileExtension)
    }

    /// The suffix of a hint file being written.
    static let hintTemporarySuffix = ".tmp"
}

extension JournalStore {
    /// The hint of a segment as ``read(_:journalPath:configuration:typeIdentifiers:buffer:)``
    /// read it, or nil when the segment must keep being read at open (it has damage, a torn
    /// tail, no valid header, or a record that did not decode).
    static func hint(of read: ReadSegment, maximumRecordSize: Int) -> JournalHint.Encoder? {
        let scan = read.scan
        guard scan.header != nil, scan.corruptRegions.isEmpty, scan.tornTail == nil else { return nil }
        var typeIdentifiers: [String] = []
        var encoder = JournalHint.Encoder()
        func plain(_ body: Data, id: UUID) -> RecordFormat.PlainFields? {
            guard let fields = RecordFormat.plainFields(
                of: body, maximumSize: maximumRecordSize, checksumVerified: true, typeIdentifiers: &typeIdentifiers
            ), fields.key.uuid == id else { return nil }
            return fields
        }
        for (located, peeked) in zip(scan.frames, read.peeked) {
            let frame = located.frame
            switch (frame.kind, peeked) {
            case (.put, .record(let fields)), (.moveToFailed, .record(let fields)):
                encoder.append(.record(JournalHint.Record(
                    kind: frame.kind == .put ? .put : .moveToFailed, offset: Int64(located.offset), length: Int32(frame.size),
                    fields: fields, plain: plain(frame.body, id: fields.id)
                )))
            case (.batch, .batch(let records)):
                let bodyOffset = Int64(located.offset + JournalFrame.headerSize)
                let bodyStart = frame.body.startIndex
                for record in records {
                    let start = bodyStart + Int(record.offset)
                    let part = frame.body[start..<(start + Int(record.length))]
                    encoder.append(.record(JournalHint.Record(
                        kind: .batchPart, offset: bodyOffset + record.offset, length: record.length, fields: record.fields,
                        plain: plain(part, id: record.fields.id)
                    )))
                }
            case (.remove, .other), (.retire, .other), (.attempt, .other):
                encoder.append(.frame(offset: Int64(located.offset), kind: frame.kind, body: Data(frame.body)))
            default:
                // A record that did not decode: the segment is read at each open, which
                // reports it.
                return nil
            }
        }
        return encoder
    }

    /// The hint of `name` and the segment opened for reading, when a hint file is there and
    /// holds (see the top of this file); nil otherwise.
    static func readHint(
        for name: JournalSegmentName, journalPath: String, configuration: Configuration, typeIdentifiers: inout [String]
    ) -> (hint: JournalHint, file: JournalSegmentFile)? {
        let fileSystem = configuration.fileSystem
        let hintPath = journalPath + "/" + name.hintFileName
        guard let hintDescriptor = try? fileSystem.open(hintPath, O_RDONLY | O_CLOEXEC | O_NOFOLLOW, 0) else { return nil }
        let bytes = try? JournalSegmentFile.readWhole(hintPath, descriptor: hintDescriptor, fileSystem: fileSystem) { Data(count: $0) }
        try? fileSystem.close(hintDescriptor)
        guard let bytes, let hint = JournalHint.decode(bytes, typeIdentifiers: &typeIdentifiers),
              hint.number == name.number, hint.generation == name.generation, hint.validEnd >= Int64(JournalSegment.headerSize)
        else { return nil }
        let path = journalPath + "/" + name.fileName
        guard let file = try? JournalSegmentFile.open(name, path: path, salt: hint.salt, fileSystem: fileSystem) else { return nil }
        // The segment's header names the hint's salt and number, and no frame of the segment
        // begins where the hint ends.
        guard let header = try? file.read(count: JournalSegment.headerSize, at: 0),
              header.starts(with: JournalSegment.magic),
              header.withUnsafeBytes({ raw in
                  let bytes = raw.bindMemory(to: UInt8.self)
                  return UInt32(bytes.bigEndianValue(at: 12, width: 4)) == hint.salt && bytes.bigEndianValue(at: 16, width: 8) == hint.number
              }),
              let size = try? fileSystem.linkStatus(path).size, size >= hint.validEnd
        else { return nil }
        let following = min(Int64(JournalFrame.headerSize), size - hint.validEnd)
        if following > 0 {
            guard let next = try? file.read(count: Int(following), at: hint.validEnd) else { return nil }
            if JournalFrame.beginsFrame(next, salt: hint.salt) { return nil }
        }
        return (hint, file)
    }

    /// Writes the hint `encoder` makes for `segment` (temporary name, then rename), unflushed.
    /// Best effort: a hint that cannot be written is not there, and the segment is read.
    static func writeHint(
        _ encoder: inout JournalHint.Encoder, for segment: JournalSegmentName, salt: UInt32, validEnd: Int64,
        journalPath: String, configuration: Configuration
    ) -> Bool {
        let fileSystem = configuration.fileSystem
        let path = journalPath + "/" + segment.hintFileName
        let temporary = path + JournalSegmentName.hintTemporarySuffix
        do {
            let descriptor = try fileSystem.open(temporary, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, DurableFile.filePermissions)
            defer { try? fileSystem.close(descriptor) }
            func write(_ bytes: [UInt8], at offset: Int64) throws {
                try bytes.withUnsafeBytes { raw in
                    var done = 0
                    while done < raw.count {
                        let count = try fileSystem.writeAt(descriptor, UnsafeRawBufferPointer(rebasing: raw[done...]), offset + Int64(done))
                        guard count > 0 else { throw SystemCallError("pwrite", path: temporary, code: EIO) }
                        done += count
                    }
                }
            }
            var offset = Int64(JournalHint.headerSize)
            let entries = encoder.takeBytes()
            try write(entries, at: offset)
            offset += Int64(entries.count)
            let (header, tail) = encoder.finish(salt: salt, number: segment.number, generation: segment.generation, validEnd: validEnd)
            try write(tail, at: offset)
            try write(header, at: 0)
            try fileSystem.rename(temporary, path)
            return true
        } catch {
            try? fileSystem.unlink(temporary)
            return false
        }
    }

    /// Makes the hints of sealed segments that have none; runs on ``compactionQueue``.
    func hintSegments(_ names: [JournalSegmentName]) {
        // Each segment is read into mapped pages, given back once its hint is written: a
        // process that adds a million records does not keep a heap grown by reading them.
        let pages = MappedPages(keeping: 1)
        defer { pages.close() }
        for name in names {
            let isDue = state.withLock { state in
                !state.isClosed && state.failure == nil && !state.hinted.contains(name) && state.active?.file.name != name
                    && state.segments[name] != nil
            }
            guard isDue else { continue }
            var typeIdentifiers: [String] = []
            let path = journalPath + "/" + name.fileName
            guard let read = try? Self.read(name, journalPath: journalPath, configuration: configuration, typeIdentifiers: &typeIdentifiers, buffer: { count in
                try pages.bytes(count, path: path)
            }),
                  var encoder = Self.hint(of: read, maximumRecordSize: configuration.maximumRecordSize),
                  let salt = read.scan.header?.salt
            else { continue }
            let validEnd = Int64(read.scan.validEnd(segmentSize: read.bytes.count))
            guard Self.writeHint(&encoder, for: name, salt: salt, validEnd: validEnd, journalPath: journalPath, configuration: configuration) else { continue }
            let kept = state.withLock { state -> Bool in
                guard state.segments[name] != nil, !state.isClosed else { return false }
                state.hinted.insert(name)
                return true
            }
            // Its segment went meanwhile (a compaction on another path): so does the hint.
            if !kept { try? configuration.fileSystem.unlink(journalPath + "/" + name.hintFileName) }
        }
    }

    /// Starts making the hints of `names` off the caller's thread.
    func hintSegmentsLater(_ names: [JournalSegmentName]) {
        guard !names.isEmpty, !configuration.isReadOnly else { return }
        compactionQueue.async { [weak self] in self?.hintSegments(names) }
    }
}

extension JournalFrame {
    /// Whether `bytes` begin with a frame header of the segment salted `salt` (its marker,
    /// salt and header checksum): bytes a writer appended.
    static func beginsFrame(_ bytes: Data, salt: UInt32) -> Bool {
        bytes.withUnsafeBytes { raw in
            let bytes = raw.bindMemory(to: UInt8.self)
            guard bytes.count >= headerSize, bytes[0] == marker[0], bytes[1] == marker[1], bytes[2] == marker[2], bytes[3] == marker[3] else { return false }
            return CRC32.checksum(of: UnsafeBufferPointer(rebasing: bytes[0..<16])) == UInt32(bytes.bigEndianValue(at: 16, width: 4))
                && UInt32(bytes.bigEndianValue(at: 4, width: 4)) == salt
        }
    }
}
