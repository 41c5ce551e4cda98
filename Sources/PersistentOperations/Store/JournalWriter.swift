import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The one writer of a journal segment: it appends frames at the segment's end and makes them
/// durable with as few flushes as it can (group commit).
///
/// Every change to the journal is a frame appended here, so the writer is the single owner of
/// the segment's descriptor and end: appends are written one at a time, in order, each as a
/// whole (`pwrite` at the end the writer keeps). Then:
///
/// - ``Durability/flushed``: ``append(_:durability:)`` returns once the frame is flushed to
///   stable storage (`fdatasync`; `F_FULLFSYNC` on Apple platforms). Concurrent callers share
///   flushes: a caller that finds a flush running waits for it, and the next flush — run by
///   the first caller to need it — covers every frame written meanwhile. Under load, N
///   appends cost a handful of flushes.
/// - ``Durability/written``: returns once the frame is written (it is in the page cache: a
///   process crash or kill keeps it). It is flushed by the next flush anyone asks for, or
///   ``flushDelay`` later at the latest (how a removal rides along).
/// - A writer made with `flushes: false` never flushes (the durability level that survives
///   crashes and kills but not power cuts).
///
/// A writer that flushes fills the segment with zeros ahead of its frames, ``fillAhead`` bytes
/// at a time, and appends over them. Appending inside the file's size changes no metadata,
/// so a flush writes the frame's pages and nothing else: on ext4 an `fdatasync` after an
/// append that grows the file also commits the file system's journal, about 1.6 times the
/// cost (about 80 against 130 µs measured on an ext4 virtual disk). A reader takes zeros after
/// the last frame for unused space (``JournalSegmentScan/unusedTail``); ``trim()`` and
/// ``close()`` give the space back.
///
/// Failures lose nothing acknowledged:
///
/// - A write that fails (a full disk) is cut back: the segment ends where the frame began,
///   the call throws, and the writer goes on.
/// - A flush that fails fails the writer for good. After a failed `fsync` the kernel may have
///   dropped the unflushed pages, and a later flush that succeeds would not bring them back:
///   nothing written since the last good flush can be trusted. Every call throws from then on;
///   the store starts a new segment.
///
/// ```swift
/// let path = directory.appendingPathComponent("00000001.segment").path
/// let descriptor = try FileSystem.system.open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
/// let writer = JournalWriter(descriptor: descriptor, path: path, end: 0, fileSystem: .system)
/// defer { writer.close() }
/// try writer.append(Data("a record".utf8), durability: .flushed)   // durable when it returns
/// try writer.append(Data("a removal".utf8), durability: .written)  // flushed with the next, or soon
/// ```
///
/// Thread safety: any thread may call any method. Writes happen under the writer's lock, one
/// at a time; flushes outside it.
package final class JournalWriter: @unchecked Sendable {
    // @unchecked: every `var` below is only touched while `condition` is locked.

    /// How durable an appended frame is when ``append(_:durability:)`` returns.
    package enum Durability: Sendable {
        /// Flushed to stable storage: survives a power cut.
        case flushed
        /// Written to the file: survives a process crash; flushed soon after.
        case written
        /// Written to the file: survives a process crash; flushed only by the next flush
        /// anyone asks for (what need not survive a power cut, such as crash evidence).
        case writtenUnscheduled
    }

    /// How long a ``Durability/written`` frame waits at most for a flush: 50 ms. Long enough
    /// for a burst of removals to share one flush, short enough that an operation completed
    /// just before a power cut rarely runs again.
    package static let defaultFlushDelay: TimeInterval = 0.05
    /// How many bytes a flushing writer fills with zeros ahead of its frames at a time: 64 KiB
    /// (one metadata commit for about 80 typical lifecycles). A store passes no more than its
    /// segment size.
    package static let defaultFillAhead = 64 << 10

    package let path: String
    /// How long a ``Durability/written`` frame waits at most for a flush.
    package let flushDelay: TimeInterval
    /// Whether the writer flushes at all.
    package let flushes: Bool

    private let descriptor: Int32
    private let fileSystem: FileSystem
    private let condition = NSCondition()
    private var end: Int64
    /// The file's size: frames end at `end`, zeros follow up to here.
    private var allocated: Int64
    private let fillAhead: Int
    /// Frames written so far, and through which of them the file is flushed.
    private var framesWritten: UInt64 = 0
    private var framesFlushed: UInt64 = 0
    private var isFlushing = false
    private var isFlushScheduled = false
    private var flushesDone = 0
    private var failure: PersistenceError?
    private var isClosed = false
    /// Runs the scheduled flushes of ``Durability/written`` frames: a serial queue of the
    /// writer's own, so that the thread waiting there for the writer's lock and the flush is
    /// never one of the few threads of the global concurrent queues (on Linux, those are also
    /// the threads of Swift concurrency's cooperative pool).
    private let flushQueue = DispatchQueue(label: "PersistentOperations.JournalWriter.flush")

    /// Creates the writer of the segment open at `descriptor` (for writing), whose valid
    /// frames end at `end`, followed by zeros up to `allocated` (the file's size, when more);
    /// it appends there. The writer owns the descriptor from now on and closes it in
    /// ``close()``. `fillAhead`: see ``defaultFillAhead``; 0 appends to the end of the file.
    package init(
        descriptor: Int32, path: String, end: Int64, allocated: Int64? = nil, fileSystem: FileSystem,
        flushes: Bool = true, flushDelay: TimeInterval = JournalWriter.defaultFlushDelay,
        fillAhead: Int = JournalWriter.defaultFillAhead
    ) {
        self.descriptor = descriptor
        self.path = path
        self.end = end
        self.allocated = max(end, allocated ?? end)
        self.fillAhead = flushes ? fillAhead : 0
        self.fileSystem = fileSystem
        self.flushes = flushes
        self.flushDelay = flushDelay
    }

    /// Where the next frame will start: the size of the segment's valid frames.
    package var size: Int64 {
        condition.lock()
        defer { condition.unlock() }
        return end
    }

    /// How many flushes the writer has run (for tests and benchmarks).
    package var flushCount: Int {
        condition.lock()
        defer { condition.unlock() }
        return flushesDone
    }

    /// Appends `frame` at the end of the segment; returns the offset where it starts, once it
    /// is as durable as `durability` says.
    ///
    /// - Throws: ``PersistenceError`` with code ``PersistenceError/Code/writeFailed`` when the
    ///   write fails (nothing of the frame is left in the segment) or a flush fails (then every
    ///   later call fails too), or when the writer is closed.
    @discardableResult
    package func append(_ frame: Data, durability: Durability) throws -> Int64 {
        try append(frame, then: [], durability: durability)
    }

    /// Appends the frame whose first bytes are `first` and whose rest is `rest`, piece after
    /// piece (a large frame's body, written as it is rather than copied after its header), as
    /// ``append(_:durability:)`` does: a failure leaves nothing of any piece.
    @discardableResult
    package func append(_ first: Data, then rest: [Data], durability: Durability) throws -> Int64 {
        condition.lock()
        defer { condition.unlock() }
        try checkUsable()
        let offset = end
        let count = rest.reduce(first.count) { $0 + $1.count }
        fillAheadIfNeeded(for: count)
        do {
            try writeWhole(first, at: offset)
            var pieceOffset = offset + Int64(first.count)
            for piece in rest {
                try writeWhole(piece, at: pieceOffset)
                pieceOffset += Int64(piece.count)
            }
        } catch {
            allocated = offset
            do {
                try fileSystem.truncate(descriptor, offset)
            } catch {
                // The frame's beginning may still be there: nothing may follow it.
                failure = PersistenceError(
                    .writeFailed, "A write to the journal failed and could not be undone; the segment takes no more frames.",
                    fileURL: URL(fileURLWithPath: path), underlyingError: error
                )
            }
            throw PersistenceError(.writeFailed, "Could not append to the journal.", fileURL: URL(fileURLWithPath: path), underlyingError: error)
        }
        end += Int64(count)
        allocated = max(allocated, end)
        framesWritten += 1
        guard flushes else { return offset }
        switch durability {
        case .flushed:
            try waitUntilFlushed(through: framesWritten)
        case .written:
            scheduleFlush()
        case .writtenUnscheduled:
            break
        }
        return offset
    }

    /// Returns once every frame written so far is flushed (at once for a writer that does not
    /// flush).
    ///
    /// - Throws: ``PersistenceError`` when a flush fails or the writer is closed.
    package func flush() throws {
        condition.lock()
        defer { condition.unlock() }
        try checkUsable()
        guard flushes else { return }
        try waitUntilFlushed(through: framesWritten)
    }

    /// Gives back the zeros filled ahead of the frames: the file ends where they do. For a
    /// segment that takes no more frames (it is flushed afterwards, with its last frames).
    package func trim() {
        condition.lock()
        defer { condition.unlock() }
        trimUnderLock()
    }

    /// Flushes what was written (unless the writer does not flush or has failed), gives back
    /// the space filled ahead, and closes the segment's descriptor. Later calls throw.
    package func close() {
        condition.lock()
        guard !isClosed else {
            condition.unlock()
            return
        }
        trimUnderLock()
        if flushes && failure == nil {
            try? waitUntilFlushed(through: framesWritten)
        }
        while isFlushing { condition.wait() }
        isClosed = true
        condition.unlock()
        try? fileSystem.close(descriptor)
    }

    // MARK: - Under the lock

    private func checkUsable() throws {
        if isClosed {
            throw PersistenceError(.writeFailed, "The journal writer is closed.", fileURL: URL(fileURLWithPath: path))
        }
        if let failure { throw failure }
    }

    private func trimUnderLock() {
        guard !isClosed, allocated > end else { return }
        if (try? fileSystem.truncate(descriptor, end)) != nil { allocated = end }
    }

    /// Fills the file with zeros ahead of the frames when `count` more bytes would not fit
    /// in it (best effort: on a full disk the frame is appended to the end of the file).
    private func fillAheadIfNeeded(for count: Int) {
        guard fillAhead > 0, end + Int64(count) > allocated else { return }
        let target = (end + Int64(count) + Int64(fillAhead) + 4095) / 4096 * 4096
        // Zeros from where the frame will end: the frame's own bytes are about to be written,
        // and until they are, the file reads as zeros there (a file extended by a write past
        // its end reads as zeros up to it). A large frame is not written twice.
        let from = max(allocated, end + Int64(count))
        do {
            try writeWhole(Data(count: Int(target - from)), at: from)
            allocated = target
        } catch {
            // Whatever was filled reads as unused space; the frame goes at the end.
            if (try? fileSystem.truncate(descriptor, end)) != nil { allocated = end }
        }
    }

    private func writeWhole(_ frame: Data, at offset: Int64) throws {
        try fileSystem.writeWhole(descriptor, frame, at: offset, path: path)
    }

    /// Waits until frame `sequence` is flushed, running the flush when no one else is. Called
    /// and returns with the lock held; the flush itself runs without it.
    private func waitUntilFlushed(through sequence: UInt64) throws {
        while framesFlushed < sequence {
            if let failure { throw failure }
            if isFlushing {
                condition.wait()
                continue
            }
            isFlushing = true
            let target = framesWritten
            condition.unlock()
            let result = Result { try fileSystem.synchronizeData(descriptor) }
            condition.lock()
            isFlushing = false
            flushesDone += 1
            switch result {
            case .success:
                framesFlushed = max(framesFlushed, target)
            case .failure(let error):
                failure = PersistenceError(
                    .writeFailed, "Flushing the journal failed; what was written since the last flush cannot be trusted, and the segment takes no more frames.",
                    fileURL: URL(fileURLWithPath: path), underlyingError: error
                )
            }
            condition.broadcast()
        }
    }

    private func scheduleFlush() {
        guard !isFlushScheduled else { return }
        isFlushScheduled = true
        flushQueue.asyncAfter(deadline: .now() + flushDelay) { [weak self] in
            self?.runScheduledFlush()
        }
    }

    private func runScheduledFlush() {
        condition.lock()
        defer { condition.unlock() }
        isFlushScheduled = false
        guard !isClosed, failure == nil else { return }
        // A failure is kept for the next caller, which throws it.
        try? waitUntilFlushed(through: framesWritten)
    }
}
