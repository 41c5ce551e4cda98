import Foundation
import PersistentOperations
import RetryingOperation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// What the store benchmarks (P3, P4, P5 and P7's record size) share: the stored operation,
// temporary store directories, waiting for one operation's outcome, writing many records
// through the public API, and the raw durable write P3 compares with.

/// The operation the store benchmarks store: a typical payload, and an attempt that
/// succeeds at once.
final class StoredBenchmarkOperation: RetryingOperation, PersistentOperation, @unchecked Sendable {
    // @unchecked: the only stored property is a constant.
    static let persistenceIdentifier = "benchmarks.typical-payload"
    let payload: TypicalPayload

    init(payload: TypicalPayload) {
        self.payload = payload
        super.init()
    }

    override var isAsynchronous: Bool { true }

    override func startBaseOperation(isRetry: Bool) {
        baseOperationEnded()
    }
}

/// A fresh directory under the temporary directory (on the same disk as everything else
/// the benchmarks write), removed by ``remove()``.
struct TemporaryDirectory {
    let url: URL

    init(_ label: String) throws {
        url = FileManager.default.temporaryDirectory
            .appendingPathComponent("retrying-benchmarks-\(label)-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    /// Removes the directory and everything in it (one level of subdirectories, as a store
    /// has), unlinking files directly: much faster than `FileManager` for 100,000 files.
    func remove() {
        let root = url.path
        for name in (try? FileManager.default.contentsOfDirectory(atPath: root)) ?? [] {
            let path = root + "/" + name
            for child in (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? [] {
                unlink(path + "/" + child)
            }
            if rmdir(path) != 0 { unlink(path) }
        }
        try? FileManager.default.removeItem(at: url)
    }
}

/// Lets a thread wait for the outcome of one operation of a queue, through the queue's
/// public events.
final class OutcomeWaiter: @unchecked Sendable {
    // @unchecked: `finished` and `waiting` are only touched while `lock` is held.
    private let lock = NSLock()
    private var finished: Set<PersistentOperationID> = []
    /// The producers waiting, each for its own operation: only that one is woken (a
    /// broadcast would wake every producer at each end, and all but one would sleep again).
    private var waiting: [PersistentOperationID: DispatchSemaphore] = [:]

    /// Installs the waiter as `queue`'s event handler.
    init(queue: PersistentOperationQueue) {
        queue.eventHandler = { [weak self] event in
            switch event {
            case .succeeded(let id), .cancelled(let id), .failed(let id, _):
                self?.noteFinished(id)
            default:
                break
            }
        }
    }

    private func noteFinished(_ id: PersistentOperationID) {
        lock.lock()
        let waiter = waiting.removeValue(forKey: id)
        if waiter == nil { finished.insert(id) }
        lock.unlock()
        waiter?.signal()
    }

    /// Returns once the operation `id` has succeeded, failed or been cancelled, which the
    /// queue reports after removing or moving its record.
    func wait(for id: PersistentOperationID) throws {
        lock.lock()
        if finished.remove(id) != nil {
            lock.unlock()
            return
        }
        let semaphore = DispatchSemaphore(value: 0)
        waiting[id] = semaphore
        lock.unlock()
        guard semaphore.wait(timeout: .now() + 60) == .success else {
            throw BenchmarkFailure("operation \(id) did not finish within 60 s")
        }
    }
}

/// Store set-up through the public API.
enum StoreFixture {
    /// A queue on `directory` with the benchmark type registered.
    static func openQueue(
        _ directory: URL, suspended: Bool, durability: PersistentOperationQueue.Durability = .flushed
    ) throws -> PersistentOperationQueue {
        let operationQueue = OperationQueue()
        operationQueue.isSuspended = suspended
        var configuration = PersistentOperationQueue.Configuration()
        configuration.durability = durability
        let queue = try PersistentOperationQueue(directory: directory, operationQueue: operationQueue, configuration: configuration)
        queue.register(StoredBenchmarkOperation.self)
        return queue
    }

    /// Adds `count` typical operations to `queue` with `addOperations`, 10,000 at a time
    /// (one batch frame each): the fastest way to fill a large store.
    static func addInBatches(_ count: Int, to queue: PersistentOperationQueue) throws {
        var left = count
        while left > 0 {
            let batch = min(left, 10_000)
            _ = try queue.addOperations((0..<batch).map { _ in StoredBenchmarkOperation(payload: .example) })
            left -= batch
        }
    }

    /// Fills a new store at `directory` with `count` typical operations, 10,000 to an
    /// `addOperations` (a suspended queue), then closes it.
    static func fillInBatches(_ count: Int, at directory: URL) throws {
        let queue = try openQueue(directory, suspended: true)
        try addInBatches(count, to: queue)
        queue.close()
    }

    /// Adds `count` typical operations to `queue` from `producers` threads at once (the
    /// queue shares directory syncs among concurrent adds, so this is much faster than one
    /// thread).
    static func add(_ count: Int, to queue: PersistentOperationQueue, producers: Int = 8) throws {
        try onThreads(producers) { producer in
            for _ in 0..<share(of: count, for: producer, among: producers) {
                try queue.addOperation(StoredBenchmarkOperation(payload: .example))
            }
        }
    }

    /// Writes `count` pending records of the typical payload to a new store at `directory`
    /// with a suspended queue, from `producers` threads, then closes it.
    static func writePendingRecords(_ count: Int, to directory: URL, producers: Int = 8) throws {
        let queue = try openQueue(directory, suspended: true)
        try add(count, to: queue, producers: producers)
        queue.close()
    }

    /// The number of pending records in the store, read as an inspector would.
    static func pendingRecordCount(_ directory: URL) throws -> Int {
        try ReadOnlyPersistentStore(directory: directory).counts().pending
    }

    /// The bytes of the record of one typical operation, as the queue stores it (the body of
    /// its journal frame: the versioned record format).
    static func typicalRecordFile() throws -> Data {
        try withTypicalRecord { record, _ in record }
    }

    /// The size of the record of one typical operation, and of its journal frame (the record
    /// and the frame's 24-byte header): what it takes on disk.
    static func typicalRecordFileSize() throws -> (bytes: Int, allocatedBytes: Int) {
        try withTypicalRecord { record, frame in (record.count, frame) }
    }

    /// Stores one typical operation in a new store and passes its record bytes and its frame
    /// size to `body`.
    private static func withTypicalRecord<Result>(_ body: (Data, Int) throws -> Result) throws -> Result {
        let directory = try TemporaryDirectory("record")
        defer { directory.remove() }
        try writePendingRecords(1, to: directory.url)
        let records = try JournalReader.records(in: directory.url)
        guard records.count == 1 else {
            throw BenchmarkFailure("expected one record in the journal, found \(records.count)")
        }
        return try body(records[0], records[0].count + JournalReader.frameHeaderSize)
    }
}

/// Reads the records of a store's journal directly, as the documented format lays them out
/// (see "The store on disk"): the bare baseline of a restore, without the library.
enum JournalReader {
    static let segmentHeaderSize = 32
    static let frameHeaderSize = 24

    /// The bytes of every record put in the journal and not removed, in journal order.
    static func records(in store: URL) throws -> [Data] {
        let journal = store.appendingPathComponent("journal")
        let names = try FileManager.default.contentsOfDirectory(atPath: journal.path).filter { $0.hasSuffix(".segment") }.sorted()
        var order: [String] = []
        var live: [String: Data] = [:]
        for name in names {
            let bytes = try BareRecordReader.contents(ofFile: journal.path + "/" + name)
            try bytes.withUnsafeBytes { (raw: UnsafeRawBufferPointer) in
                func value(_ at: Int) -> Int {
                    (0..<4).reduce(0) { $0 << 8 | Int(raw[at + $1]) }
                }
                var offset = segmentHeaderSize
                while offset + frameHeaderSize <= raw.count {
                    let kind = raw[offset + 8]
                    let length = value(offset + 12)
                    let body = offset + frameHeaderSize
                    guard length > 0, body + length <= raw.count else { break }
                    switch kind {
                    case 1, 4:   // put, move to failed
                        let record = Data(raw[body..<(body + length)])
                        let id = try identifier(of: record)
                        if live.updateValue(record, forKey: id) == nil { order.append(id) }
                    case 3:      // batch: a count, then each part's length and bytes
                        var part = body + 4
                        for _ in 0..<value(body) {
                            let size = value(part)
                            let record = Data(raw[(part + 4)..<(part + 4 + size)])
                            let id = try identifier(of: record)
                            if live.updateValue(record, forKey: id) == nil { order.append(id) }
                            part += 4 + size
                        }
                    case 2:      // remove
                        live[String(decoding: raw[body..<(body + length)], as: UTF8.self)] = nil
                    default:
                        break
                    }
                    offset = body + length
                }
            }
        }
        return order.compactMap { live[$0] }
    }

    private static func identifier(of record: Data) throws -> String {
        struct Identified: Decodable { var id: String }
        return try PropertyListDecoder().decode(Identified.self, from: record.subdata(in: BareRecordReader.headerSize..<record.count)).id
    }
}

/// The part of `total` that thread `index` of `threads` takes on.
func share(of total: Int, for index: Int, among threads: Int) -> Int {
    total / threads + (index < total % threads ? 1 : 0)
}

/// Runs `body(0)` … `body(count - 1)` on `count` threads of their own, all at once, and
/// returns when all have returned; rethrows the first error.
///
/// Not `DispatchQueue.concurrentPerform`, which runs only as many at once as there are
/// cores: a producer blocked in a disk sync must not hold back the others.
func onThreads(_ count: Int, _ body: @escaping @Sendable (Int) throws -> Void) throws {
    let group = DispatchGroup()
    let errors = Locked<[String]>([])
    for index in 0..<count {
        group.enter()
        let thread = Thread {
            do {
                try body(index)
            } catch {
                errors.withLock { $0.append("\(error)") }
            }
            group.leave()
        }
        thread.start()
    }
    group.wait()
    if let error = errors.withLock({ $0.first }) {
        throw BenchmarkFailure("a producer thread failed: \(error)")
    }
}

/// A value any thread may read or change, one at a time.
final class Locked<Value: Sendable>: @unchecked Sendable {
    // @unchecked: `value` is only touched while `lock` is held.
    private let lock = NSLock()
    private var value: Value

    init(_ value: Value) {
        self.value = value
    }

    func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}

/// The durable write a store has to do at the least: write a new file, sync it, rename it
/// into place, sync the directory — the same steps as adding a record, without anything
/// else.
enum RawDurableWrite {
    /// Writes `bytes` durably to `directory/name`, through a temporary file.
    static func writeFile(_ bytes: Data, to directory: String, name: String) throws {
        let temporary = directory + "/." + name + ".tmp"
        let descriptor = open(temporary, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw failure("open") }
        let written = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
        guard written == bytes.count else { close(descriptor); throw failure("write") }
        guard fsync(descriptor) == 0 else { close(descriptor); throw failure("fsync") }
        guard close(descriptor) == 0 else { throw failure("close") }
        guard rename(temporary, directory + "/" + name) == 0 else { throw failure("rename") }
        try synchronizeDirectory(directory)
    }

    /// Syncs the directory at `path`, making renames and unlinks in it durable.
    static func synchronizeDirectory(_ path: String) throws {
        let descriptor = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard descriptor >= 0 else { throw failure("open directory") }
        defer { close(descriptor) }
        guard fsync(descriptor) == 0 else { throw failure("fsync directory") }
    }

    private static func failure(_ call: String) -> BenchmarkFailure {
        BenchmarkFailure("\(call) failed: \(String(cString: strerror(errno)))")
    }
}
