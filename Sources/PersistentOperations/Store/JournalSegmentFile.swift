import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The name of a journal segment file, and the order in which segments are read.
///
/// A name is `<number>-<generation>.segment`, both in fixed-width hexadecimal, such as
/// `0000000000000003-00000000.segment`. Segments are read in (number, generation) order. A
/// segment the store appends to has generation 0 and a number one more than the last segment's;
/// a segment written by compaction takes the number of the last segment it replaces and the
/// next generation, so it is read after everything it replaces and before every segment that
/// was appended to while it was written (see `JournalStore+Compaction.swift`).
struct JournalSegmentName: Hashable, Comparable, Sendable, CustomStringConvertible {
    /// The extension of segment files.
    static let fileExtension = "segment"
    /// The name compaction writes a segment under before renaming it into place.
    static let temporaryFileName = "compaction.tmp"

    var number: UInt64
    var generation: UInt32

    /// The file name.
    var fileName: String {
        Self.hex(number, width: 16) + "-" + Self.hex(UInt64(generation), width: 8) + "." + Self.fileExtension
    }

    var description: String { fileName }

    init(number: UInt64, generation: UInt32 = 0) {
        self.number = number
        self.generation = generation
    }

    /// The segment a file name stands for, `nil` for any other name.
    init?(fileName: String) {
        let suffix = "." + Self.fileExtension
        guard fileName.hasSuffix(suffix) else { return nil }
        let parts = fileName.dropLast(suffix.count).split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count == 2, parts[0].count == 16, parts[1].count == 8,
              let number = UInt64(parts[0], radix: 16), let generation = UInt32(parts[1], radix: 16) else { return nil }
        self.init(number: number, generation: generation)
        guard self.fileName == fileName else { return nil }
    }

    static func < (lhs: Self, rhs: Self) -> Bool {
        (lhs.number, lhs.generation) < (rhs.number, rhs.generation)
    }

    private static func hex(_ value: UInt64, width: Int) -> String {
        let digits = String(value, radix: 16)
        return String(repeating: "0", count: max(0, width - digits.count)) + digits
    }
}

/// An open segment for reading: a read-only descriptor, closed when the last reference goes.
///
/// A reader takes a reference under the store's lock and reads without it, so compaction can
/// drop a segment from the store while a read of it is under way.
final class JournalSegmentFile: Sendable {
    // Sendable: every property is a constant; the descriptor is only read with `pread`.
    let name: JournalSegmentName
    let path: String
    /// The salt of the segment's frames, `nil` when its header was damaged at open.
    let salt: UInt32?
    private let descriptor: Int32
    private let fileSystem: FileSystem

    init(name: JournalSegmentName, path: String, salt: UInt32?, descriptor: Int32, fileSystem: FileSystem) {
        self.name = name
        self.path = path
        self.salt = salt
        self.descriptor = descriptor
        self.fileSystem = fileSystem
    }

    deinit {
        try? fileSystem.close(descriptor)
    }

    /// Opens the segment at `path` read-only.
    static func open(_ name: JournalSegmentName, path: String, salt: UInt32?, fileSystem: FileSystem) throws -> JournalSegmentFile {
        let descriptor = try fileSystem.open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW, 0)
        return JournalSegmentFile(name: name, path: path, salt: salt, descriptor: descriptor, fileSystem: fileSystem)
    }

    /// The `count` bytes at `offset`, in one `pread` (repeated only if it comes back short),
    /// into the bytes `buffer` gives for `count` (by default, new ones).
    ///
    /// - Throws: ``PersistenceError/Code/readFailed`` when the file ends first or the read fails.
    func read(count: Int, at offset: Int64, into buffer: ((Int) throws -> Data)? = nil) throws -> Data {
        var data = try buffer?(count) ?? Data(count: count)
        do {
            try data.withUnsafeMutableBytes { buffer in
                var done = 0
                while done < count {
                    let read = try fileSystem.readAt(descriptor, UnsafeMutableRawBufferPointer(rebasing: buffer[done...]), offset + Int64(done))
                    guard read > 0 else { throw SystemCallError("pread", path: path, code: EIO) }
                    done += read
                }
            }
        } catch {
            throw PersistenceError(.readFailed, "Could not read the journal segment.", fileURL: URL(fileURLWithPath: path), underlyingError: error)
        }
        return data
    }

    /// Reads the whole file from its start: one sequential read, into the bytes `buffer`
    /// gives for the file's size.
    static func readWhole(_ path: String, descriptor: Int32, fileSystem: FileSystem, buffer: (Int) throws -> Data) throws -> Data {
        let size = Int(try fileSystem.status(descriptor).size)
        var data = try buffer(size)
        var done = 0
        try data.withUnsafeMutableBytes { buffer in
            while done < size {
                let read = try fileSystem.read(descriptor, UnsafeMutableRawBufferPointer(rebasing: buffer[done...]))
                if read == 0 { break }
                done += read
            }
        }
        return data.prefix(done)
    }
}
