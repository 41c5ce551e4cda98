import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// Reading ahead of the thread that uses what is read
// ==================================================
//
// Opening a journal and restoring its pending records both read a large store in order and
// do two kinds of work on each part: reading, verifying and peeking the bytes, which needs
// nothing but the bytes, and indexing or admitting what was peeked, which needs the store's
// or the queue's state. `ReadAhead` runs the first kind on a thread of its own, one part ahead
// of the thread that does the second: on two cores, the time of the slower of the two instead
// of their sum. `MappedPages` gives the reading thread memory for the bytes that does not come
// from its heap.

/// Produces items `0..<count` in order on a thread of its own, at most ``depth`` ahead of the
/// thread that takes them with ``next()``.
///
/// The thread is not a Dispatch worker, which a pool of blocked workers could keep from
/// starting, and has the creating thread's quality of service. With one item or none, or
/// when told not to read ahead, ``next()`` produces each on the calling thread. Once an item could not be produced, none
/// after it is: ``next()`` throws that item's error.
///
/// ```swift
/// let reader = ReadAhead(count: 3, name: "example") { index in index * 10 }
/// defer { reader.finish() }
/// let first = try reader.next()   // 0, while 10 is produced on the reader's thread
/// ```
///
/// Thread safety: one thread calls ``next()`` and ``finish()``; `produce` runs on one thread
/// at a time (the reader's, or the caller's).
final class ReadAhead<Item>: @unchecked Sendable {
    // (@unchecked: `ready`, `cancelled` and `done` are read and written under `condition`
    // alone; `position` is the calling thread's; the rest are constants.)
    /// The items produced ahead at most: with 2, opening a million records took no less time
    /// and its peak was 4.5 MB higher.
    static var depth: Int { 1 }

    private let count: Int
    private let produce: (Int) throws -> Item
    private let condition = NSCondition()
    private var ready: [Result<Item, any Error>] = []
    private var cancelled = false
    private var done = false
    private var position = 0
    private let isAhead: Bool

    /// Starts producing, on a thread named `name`, unless `count` is 1 or less or `readsAhead`
    /// is false.
    init(count: Int, name: String, readsAhead: Bool = true, produce: @escaping (Int) throws -> Item) {
        self.count = count
        self.produce = produce
        isAhead = readsAhead && count > 1
        guard isAhead else { return }
        let thread = Thread { [self] in run() }
        thread.name = name
        thread.qualityOfService = Thread.current.qualityOfService
        thread.start()
    }

    /// The next item, in order; throws what producing it threw.
    func next() throws -> Item {
        precondition(position < count, "more items asked for than there are")
        defer { position += 1 }
        guard isAhead else { return try produce(position) }
        condition.lock()
        while ready.isEmpty { condition.wait() }
        let result = ready.removeFirst()
        condition.broadcast()
        condition.unlock()
        return try result.get()
    }

    /// Stops producing and waits until the reader's thread has stopped; items produced and
    /// not taken are released (outside the lock).
    func finish() {
        guard isAhead else { return }
        condition.lock()
        cancelled = true
        condition.broadcast()
        while !done { condition.wait() }
        let unused = ready
        ready = []
        condition.unlock()
        _ = unused
    }

    private func run() {
        for index in 0..<count {
            condition.lock()
            while ready.count >= Self.depth, !cancelled { condition.wait() }
            let stop = cancelled
            condition.unlock()
            if stop { break }
            let result = Result { try produce(index) }
            condition.lock()
            ready.append(result)
            condition.broadcast()
            condition.unlock()
            if case .failure = result { break }
        }
        condition.lock()
        done = true
        condition.broadcast()
        condition.unlock()
    }
}

/// Memory for bytes read on a reading thread, in pages mapped for them rather than from that
/// thread's heap (heap memory a thread frees stays with its heap: 10–20 MB more at the peak of
/// a restore of a million records), reused from one read to the next (mapping new pages for
/// each segment cost as much time as reading ahead saved).
///
/// A `Data` that ``bytes(_:path:)`` returns gives its pages back when it, and every slice of
/// it, is released; after ``close()``, pages given back are unmapped.
///
/// Thread safety: any thread.
final class MappedPages: @unchecked Sendable {
    // (@unchecked: `spare` and `isClosed` are read and written under `lock` alone.)
    private let lock = NSLock()
    private var spare: [UnsafeMutableRawBufferPointer] = []
    private var isClosed = false
    /// The spare mappings kept at most.
    private let keeping: Int

    init(keeping: Int = 3) {
        self.keeping = keeping
    }

    deinit {
        for pages in spare { munmap(pages.baseAddress, pages.count) }
    }

    /// `count` bytes (not zeroed) in mapped pages: spare ones, or new ones.
    ///
    /// - Throws: ``PersistenceError/Code/readFailed`` when no pages can be mapped.
    func bytes(_ count: Int, path: String) throws -> Data {
        lock.lock()
        var pages = spare.popLast()
        lock.unlock()
        if let small = pages, small.count < count {
            munmap(small.baseAddress, small.count)
            pages = nil
        }
        if pages == nil {
            let length = max(count, 64 << 10)
            guard let start = mmap(nil, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0), start != MAP_FAILED else {
                throw PersistenceError(
                    .readFailed, "No memory to read the journal into.", fileURL: URL(fileURLWithPath: path),
                    underlyingError: SystemCallError("mmap", path: path, code: errno)
                )
            }
            pages = UnsafeMutableRawBufferPointer(start: start, count: length)
        }
        let mapped = pages!
        return Data(bytesNoCopy: mapped.baseAddress!, count: count, deallocator: .custom { [self] _, _ in giveBack(mapped) })
    }

    /// Unmaps the spare pages; pages given back from now on are unmapped.
    func close() {
        lock.lock()
        isClosed = true
        let unused = spare
        spare = []
        lock.unlock()
        for pages in unused { munmap(pages.baseAddress, pages.count) }
    }

    private func giveBack(_ pages: UnsafeMutableRawBufferPointer) {
        lock.lock()
        let keep = !isClosed && spare.count < keeping
        if keep { spare.append(pages) }
        lock.unlock()
        if !keep { munmap(pages.baseAddress, pages.count) }
    }
}

/// Strings read on a reading thread, each kept once (see
/// ``RecordFormat/indexFields(of:typeIdentifiers:)``): a box, so that the closure a
/// ``ReadAhead`` runs can keep them from one item to the next.
///
/// Thread safety: one thread at a time (the one producing).
final class InternedStrings: @unchecked Sendable {
    var strings: [String] = []
}
