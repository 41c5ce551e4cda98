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
    /// The hint entry of a record whose bytes `record` (verified) lie at `offset`, `length`
    /// bytes long: `fields`, and its plain fields when it is a plain record whose fields name
    /// the same identifier.
    static func hintRecord(
        kind: JournalHint.Record.Kind, offset: Int64, length: Int32, fields: RecordFormat.IndexFields, record: Data,
        maximumRecordSize: Int, typeIdentifiers: inout [String]
    ) -> JournalHint.Record {
        let plain = RecordFormat.plainFields(of: record, maximumSize: maximumRecordSize, checksumVerified: true, typeIdentifiers: &typeIdentifiers)
        return JournalHint.Record(kind: kind, offset: offset, length: length, fields: fields, plain: plain?.key.uuid == fields.id ? plain : nil)
    }

    /// Makes the hint of a segment as ``read(_:journalPath:configuration:typeIdentifiers:peeks:buffer:)``
    /// read it without peeking (each frame is peeked here, as it is encoded: no array of
    /// every record's fields) into `hint`; false when the segment must keep being read at
    /// open (it has damage, a torn tail, no valid header, or a record that did not decode).
    static func hint(of read: ReadSegment, into hint: HintFileWriter, maximumRecordSize: Int) -> Bool {
        let scan = read.scan
        guard scan.header != nil, scan.corruptRegions.isEmpty, scan.tornTail == nil else { return false }
        var typeIdentifiers: [String] = []
        for located in scan.frames {
            let frame = located.frame
            switch (frame.kind, peek(located, maximumRecordSize: maximumRecordSize, typeIdentifiers: &typeIdentifiers)) {
            case (.put, .record(let fields)), (.moveToFailed, .record(let fields)):
                hint.append(.record(hintRecord(
                    kind: frame.kind == .put ? .put : .moveToFailed, offset: Int64(located.offset), length: Int32(frame.size),
                    fields: fields, record: frame.body, maximumRecordSize: maximumRecordSize, typeIdentifiers: &typeIdentifiers
                )))
            case (.batch, .batch(let records)):
                let bodyOffset = Int64(located.offset + JournalFrame.headerSize)
                let bodyStart = frame.body.startIndex
                for record in records {
                    let start = bodyStart + Int(record.offset)
                    let part = frame.body[start..<(start + Int(record.length))]
                    hint.append(.record(hintRecord(
                        kind: .batchPart, offset: bodyOffset + record.offset, length: record.length, fields: record.fields,
                        record: part, maximumRecordSize: maximumRecordSize, typeIdentifiers: &typeIdentifiers
                    )))
                }
            case (.remove, .other), (.retire, .other), (.attempt, .other):
                hint.append(.frame(offset: Int64(located.offset), kind: frame.kind, body: Data(frame.body)))
            default:
                // A record that did not decode: the segment is read at each open, which
                // reports it.
                return false
            }
        }
        return true
    }

    /// The hint file of `segment`, decoded; nil when it is missing, cannot be read, or does
    /// not decode.
    static func readHintFile(of segment: JournalSegmentName, journalPath: String, fileSystem: FileSystem) -> JournalHint? {
        let path = journalPath + "/" + segment.hintFileName
        guard let descriptor = try? fileSystem.open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW, 0) else { return nil }
        let bytes = try? JournalSegmentFile.readWhole(path, descriptor: descriptor, fileSystem: fileSystem) { Data(count: $0) }
        try? fileSystem.close(descriptor)
        return bytes.flatMap(JournalHint.decode)
    }

    /// The hint of `name` and the segment opened for reading, when a hint file is there and
    /// holds (see the top of this file); nil otherwise.
    static func readHint(
        for name: JournalSegmentName, journalPath: String, configuration: Configuration
    ) -> (hint: JournalHint, file: JournalSegmentFile)? {
        let fileSystem = configuration.fileSystem
        guard let hint = readHintFile(of: name, journalPath: journalPath, fileSystem: fileSystem),
              hint.number == name.number, hint.generation == name.generation, hint.validEnd >= Int64(JournalSegment.headerSize)
        else { return nil }
        let path = journalPath + "/" + name.fileName
        guard let file = try? JournalSegmentFile.open(name, path: path, salt: hint.salt, fileSystem: fileSystem) else { return nil }
        // The segment's header names the hint's salt and number, and no frame of the segment
        // begins where the hint ends.
        guard let bytes = try? file.read(count: JournalSegment.headerSize, at: 0), let header = JournalSegment.header(of: bytes),
              header.salt == hint.salt, header.number == hint.number,
              let size = try? fileSystem.linkStatus(path).size, size >= hint.validEnd
        else { return nil }
        let following = min(Int64(JournalFrame.headerSize), size - hint.validEnd)
        if following > 0 {
            guard let next = try? file.read(count: Int(following), at: hint.validEnd) else { return nil }
            if JournalFrame.beginsFrame(next, salt: hint.salt) { return nil }
        }
        return (hint, file)
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
            guard let read = try? Self.read(name, journalPath: journalPath, configuration: configuration, typeIdentifiers: &typeIdentifiers, peeks: false, buffer: { count in
                try pages.bytes(count, path: path)
            }),
                  let salt = read.scan.header?.salt,
                  let hint = HintFileWriter(for: name, journalPath: journalPath, fileSystem: configuration.fileSystem),
                  Self.hint(of: read, into: hint, maximumRecordSize: configuration.maximumRecordSize)
            else { continue }
            installHint(hint, salt: salt, validEnd: Int64(read.scan.validEnd(segmentSize: read.bytes.count)))
        }
    }

    /// Finishes the hint `hint` writes and counts its segment hinted, unless the segment went
    /// meanwhile (then so does the hint) or the store closed.
    func installHint(_ hint: HintFileWriter, salt: UInt32, validEnd: Int64) {
        let segment = hint.segment
        guard hint.finish(salt: salt, validEnd: validEnd) else { return }
        let kept = state.withLock { state -> Bool in
            guard state.segments[segment] != nil, !state.isClosed else { return false }
            state.hinted.insert(segment)
            return true
        }
        if !kept { try? configuration.fileSystem.unlink(journalPath + "/" + segment.hintFileName) }
    }

    /// Starts making the hints of `names` off the caller's thread.
    func hintSegmentsLater(_ names: [JournalSegmentName]) {
        guard !names.isEmpty, !configuration.isReadOnly, configuration.makesHints else { return }
        compactionQueue.async { [weak self] in self?.hintSegments(names) }
    }
}

/// A hint file being written: its entries go to a temporary file a buffer at a time as they
/// are made (a hint of a large segment is never whole in memory); ``finish(salt:validEnd:)``
/// writes its header and renames it into place, unflushed. Best effort: a hint that cannot be
/// written is not there, and its segment is read. Used by one thread at a time.
final class HintFileWriter {
    let segment: JournalSegmentName
    private let path: String
    private let temporary: String
    private let fileSystem: FileSystem
    private var descriptor: Int32?
    private var encoder = JournalHint.Encoder()
    /// Where the next entries' bytes go.
    private var offset = Int64(JournalHint.headerSize)
    private var isFinished = false

    /// The bytes of entries kept before they are written.
    static let bufferSize = 64 << 10

    /// Starts the hint of `segment`; nil when its temporary file cannot be created.
    init?(for segment: JournalSegmentName, journalPath: String, fileSystem: FileSystem) {
        self.segment = segment
        path = journalPath + "/" + segment.hintFileName
        temporary = path + JournalSegmentName.hintTemporarySuffix
        self.fileSystem = fileSystem
        guard let descriptor = try? fileSystem.open(temporary, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, DurableFile.filePermissions) else {
            return nil
        }
        self.descriptor = descriptor
    }

    /// A hint abandoned (not finished) leaves no file.
    deinit {
        if !isFinished { abandon() }
    }

    func append(_ entry: JournalHint.Entry) {
        guard descriptor != nil else { return }
        encoder.append(entry)
        if encoder.pendingByteCount >= Self.bufferSize { drain() }
    }

    private func drain() {
        guard let descriptor else { return }
        let bytes = encoder.takeBytes()
        do {
            try fileSystem.writeWhole(descriptor, bytes, at: offset, path: temporary)
            offset += Int64(bytes.count)
        } catch {
            abandon()
        }
    }

    /// Writes the rest, then the header, and renames the file into place; false, leaving no
    /// file, when any of it fails.
    func finish(salt: UInt32, validEnd: Int64) -> Bool {
        guard let descriptor else { return false }
        let (header, tail) = encoder.finish(salt: salt, number: segment.number, generation: segment.generation, validEnd: validEnd)
        do {
            try fileSystem.writeWhole(descriptor, tail, at: offset, path: temporary)
            try fileSystem.writeWhole(descriptor, header, at: 0, path: temporary)
            try? fileSystem.close(descriptor)
            self.descriptor = nil
            try fileSystem.rename(temporary, path)
            isFinished = true
            return true
        } catch {
            abandon()
            return false
        }
    }

    /// Stops: the temporary file is removed.
    func abandon() {
        isFinished = true
        if let descriptor { try? fileSystem.close(descriptor) }
        descriptor = nil
        try? fileSystem.unlink(temporary)
    }
}

extension JournalFrame {
    /// Whether `bytes` begin with a frame header of the segment salted `salt` (its marker,
    /// salt and header checksum): bytes a writer appended.
    static func beginsFrame(_ bytes: Data, salt: UInt32) -> Bool {
        bytes.withUnsafeBytes { raw in
            // Verified as far as `bytes` go: past its salt, whatever else is wrong, it is a
            // frame's header.
            switch verify(raw.bindMemory(to: UInt8.self), at: 0, salt: salt, maximumSize: .max, checkingBody: false) {
            case .success, .failure(.tooLarge), .failure(.pastEnd), .failure(.unknownKind), .failure(.reservedBitsSet): true
            case .failure(.tooShort), .failure(.noMarker), .failure(.headerChecksumMismatch), .failure(.otherSegment), .failure(.frameChecksumMismatch): false
            }
        }
    }
}
