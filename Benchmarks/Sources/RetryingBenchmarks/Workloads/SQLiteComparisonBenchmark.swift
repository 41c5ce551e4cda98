import Foundation
import PersistentOperations

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// S1–S5: the store against SQLite, what every system this package replaces keeps its work
/// in (KTBTaskQueue through FMDB, the TaskQueueService through WCDB, WorkManager through
/// Room; Core Data is SQLite too).
///
/// The SQLite side is one table with one row per operation holding the same binary
/// property-list payload (`SQLiteDatabase`), in WAL mode with `synchronous=FULL` — durable
/// against a power cut at every commit, as `addOperation` is when it returns — on the same
/// disk, in the same run. It encodes each operation's payload with `PropertyListEncoder`
/// when it stores it and decodes it when it restores it, as a queue built on SQLite must; our
/// side goes through the public API, from opening the store on.
///
/// - **S1** 400 × durable add → success → removal, one at a time (a producer waiting for
///   each, as P3's serial side). SQLite: insert (a commit), the same operation run through an
///   `OperationQueue` and waited for, as a queue kept in SQLite runs its work, then delete (a
///   commit). Also S1.process: the queue's `.processCrash` durability (no flush: survives a
///   process crash, not a power cut) against SQLite with `synchronous=NORMAL`, the same
///   guarantee. S1.db and S1.process.db report both against the database alone (insert,
///   delete, no operation run).
/// - **S3** 10,000 operations stored by one `addOperations` (a suspended queue). SQLite: the
///   10,000 payloads encoded and inserted in one transaction. Also reported: the inserts alone,
///   of bytes encoded beforehand (S3.raw).
/// - **S4** restore of those 10,000 (and, in a full run, of 100,000): opening a new queue
///   (the journal read), registering the type (its `OperationQueue` suspended) and
///   `restore()`, which decodes no payload and builds no operation (each is built when it
///   is due). SQLite: open, select every row in order, decode each payload with
///   `PropertyListDecoder` and build an operation from it, keeping them. S4.built adds, on
///   our side, building every operation (`operations()`), the same work as SQLite's side.
/// - **S5** the disk space the 10,000 pending take (allocated blocks of every file, after a
///   WAL checkpoint for SQLite); and the store's once they have all run.
///
/// Each round runs both sides, alternating which goes first; figures are medians of rounds.
struct SQLiteComparisonBenchmark: Benchmark {
    let id = "S"
    let title = "the store vs SQLite (WAL, synchronous=FULL): lifecycles, a batch, restore, disk"

    func run(in context: BenchmarkContext) throws -> [BenchmarkResult] {
        let lifecycles = context.size(full: 400, smoke: 40)
        let batch = context.size(full: 10_000, smoke: 1_000)
        let largeRestore = context.size(full: 100_000, smoke: 0)
        let rounds = context.size(full: 3, smoke: 1)
        let payload = try PropertyListEncoder.binary.encode(TypicalPayload.example)

        var ours = Sides(), full = Sides(), normal = Sides(), processCrash = Sides()
        // SQLite's side of S1 with the operation run between insert and delete (`ran`), and
        // the database alone (`alone`).
        var fullAlone: [Double] = [], normalRan: [Double] = []
        for round in 0..<rounds {
            var sides: [() throws -> Void] = [
                {
                    ours.append(try Self.ourRound(lifecycles: lifecycles, batch: batch))
                    processCrash.lifecycleRates.append(
                        try DurableThroughputBenchmark.queueSerial(count: lifecycles, durability: .processCrash).operationsPerSecond
                    )
                },
                {
                    full.append(try Self.sqliteRound(lifecycles: lifecycles, batch: batch, payload: payload, synchronous: .full))
                    fullAlone.append(try Self.sqliteLifecycles(lifecycles, synchronous: .full, runsOperations: false))
                    normalRan.append(try Self.sqliteLifecycles(lifecycles, synchronous: .normal, runsOperations: true))
                    normal.lifecycleRates.append(try Self.sqliteLifecycles(lifecycles, synchronous: .normal, runsOperations: false))
                },
            ]
            if !round.isMultiple(of: 2) { sides.reverse() }
            for side in sides { try side() }
            context.progress(String(
                format: "round %d: S1 %.0f vs %.0f ops/s (database alone %.0f; no flush: %.0f vs NORMAL %.0f, alone %.0f); S3 %.3f vs %.3f s; S4 %.3f vs %.3f s; S5 %@ vs %@ B, %@ B after",
                round + 1, ours.lifecycleRates[round], full.lifecycleRates[round], fullAlone[round],
                processCrash.lifecycleRates[round], normalRan[round], normal.lifecycleRates[round],
                ours.batchSeconds[round], full.batchSeconds[round], ours.restoreSeconds[round], full.restoreSeconds[round],
                ours.diskBytes[round].groupedDigits, full.diskBytes[round].groupedDigits, ours.diskBytesAfter[round].groupedDigits
            ))
        }

        let sqliteName = "SQLite WAL, synchronous=FULL"
        var rows = [
            BenchmarkResult(
                id: "S1", name: "durable add → success → removal, one at a time",
                value: ours.lifecycleRates.median, unit: .operationsPerSecond,
                baseline: full.lifecycleRates.median, baselineName: "\(sqliteName): insert, run, delete",
                ratio: zip(ours.lifecycleRates, full.lifecycleRates).map { $0 / $1 }.median,
                target: .ratio(atLeast: 1.5),
                note: "\(lifecycles.groupedDigits) operations per round, median of \(rounds) rounds; SQLite: payload encoded, insert (a commit), the same operation run through an OperationQueue and waited for, delete (a commit)"
            ),
            BenchmarkResult(
                id: "S1.db", name: "the same, SQLite's side the database alone",
                value: ours.lifecycleRates.median, unit: .operationsPerSecond,
                baseline: fullAlone.median, baselineName: "\(sqliteName): insert, delete",
                ratio: zip(ours.lifecycleRates, fullAlone).map { $0 / $1 }.median,
                note: "SQLite runs no operation: the database's share of S1's baseline"
            ),
            BenchmarkResult(
                id: "S1.process", name: "S1 without flushes (process-crash durability)",
                value: processCrash.lifecycleRates.median, unit: .operationsPerSecond,
                baseline: normalRan.median, baselineName: "SQLite WAL, synchronous=NORMAL: insert, run, delete",
                ratio: zip(processCrash.lifecycleRates, normalRan).map { $0 / $1 }.median,
                target: .ratio(atLeast: 1),
                note: "durability .processCrash: survives a process crash or kill, not a power cut, as synchronous=NORMAL"
            ),
            BenchmarkResult(
                id: "S1.process.db", name: "the same, SQLite's side the database alone",
                value: processCrash.lifecycleRates.median, unit: .operationsPerSecond,
                baseline: normal.lifecycleRates.median, baselineName: "SQLite WAL, synchronous=NORMAL: insert, delete",
                ratio: zip(processCrash.lifecycleRates, normal.lifecycleRates).map { $0 / $1 }.median,
                note: "SQLite runs no operation: an OperationQueue's own round trip costs about as much as both commits"
            ),
            BenchmarkResult(
                id: "S3", name: "\(batch.groupedDigits) operations stored by one addOperations",
                value: ours.batchSeconds.median, unit: .seconds,
                baseline: full.batchSeconds.median, baselineName: "\(sqliteName): encode and insert, one transaction",
                ratio: zip(ours.batchSeconds, full.batchSeconds).map { $0 / $1 }.median,
                target: .ratio(atMost: 1),
                note: "time until the call returns (durable)"
            ),
            BenchmarkResult(
                id: "S3.raw", name: "the same, SQLite storing bytes encoded beforehand",
                value: ours.batchSeconds.median, unit: .seconds,
                baseline: full.rawBatchSeconds.median, baselineName: "\(sqliteName): insert only, one transaction",
                ratio: zip(ours.batchSeconds, full.rawBatchSeconds).map { $0 / $1 }.median,
                note: "the database's share of S3's baseline"
            ),
            BenchmarkResult(
                id: "S4", name: "restore of \(batch.groupedDigits) pending",
                value: ours.restoreSeconds.median, unit: .seconds,
                baseline: full.restoreSeconds.median, baselineName: "SQLite: open, select, decode, build",
                ratio: zip(ours.restoreSeconds, full.restoreSeconds).map { $0 / $1 }.median,
                target: .ratio(atMost: 1),
                note: "ours: opening a new queue (suspended OperationQueue) and restore(), which decodes no payload and builds no operation (each is built when due); peak memory in P5"
            ),
            BenchmarkResult(
                id: "S4.built", name: "the same, then every operation built",
                value: ours.builtSeconds.median, unit: .seconds,
                baseline: full.builtSeconds.median, baselineName: "SQLite: open, select, decode, build",
                ratio: zip(ours.builtSeconds, full.builtSeconds).map { $0 / $1 }.median,
                target: .ratio(atMost: 1),
                note: "ours: S4, then operations(), which builds each operation from its record (payload decoded)"
            ),
            BenchmarkResult(
                id: "S5", name: "disk taken by \(batch.groupedDigits) pending",
                value: ours.diskBytes.map(Double.init).median, unit: .bytes,
                baseline: full.diskBytes.map(Double.init).median, baselineName: "SQLite database and WAL, after a checkpoint",
                target: .ratio(atMost: 1.5),
                note: "allocated blocks of every file"
            ),
            BenchmarkResult(
                id: "S5.after", name: "disk taken by the store once all \(batch.groupedDigits) have run",
                value: ours.diskBytesAfter.map(Double.init).median, unit: .bytes,
                target: .value(atMost: 65_536),
                note: "allocated blocks of every file and directory"
            ),
        ]
        if largeRestore > 0 {
            let (restore, sqlite) = try Self.largeRestore(largeRestore, payload: payload)
            context.progress(String(format: "S4 at %@: %.3f vs %.3f s", largeRestore.groupedDigits, restore, sqlite))
            rows.append(BenchmarkResult(
                id: "S4.large", name: "restore of \(largeRestore.groupedDigits) pending",
                value: restore, unit: .seconds, baseline: sqlite, baselineName: "SQLite: open, select, decode, build",
                target: .ratio(atMost: 1), note: "one round"
            ))
        }
        return rows
    }

    /// The figures of one side, one element per round.
    struct Sides {
        var lifecycleRates: [Double] = []
        var batchSeconds: [Double] = []
        var restoreSeconds: [Double] = []
        /// Ours: the restore, then every operation built (its payload decoded), as SQLite's
        /// side does; SQLite: its restore.
        var builtSeconds: [Double] = []
        var rawBatchSeconds: [Double] = []
        var diskBytes: [Int] = []
        var diskBytesAfter: [Int] = []

        mutating func append(_ round: Sides) {
            lifecycleRates += round.lifecycleRates
            batchSeconds += round.batchSeconds
            restoreSeconds += round.restoreSeconds
            builtSeconds += round.builtSeconds
            rawBatchSeconds += round.rawBatchSeconds
            diskBytes += round.diskBytes
            diskBytesAfter += round.diskBytesAfter
        }
    }

    /// S1, S3, S4 and S5 on our side.
    static func ourRound(lifecycles: Int, batch: Int) throws -> Sides {
        var sides = Sides()
        sides.lifecycleRates = [try DurableThroughputBenchmark.queueSerial(count: lifecycles).operationsPerSecond]

        let directory = try TemporaryDirectory("s-ours")
        defer { directory.remove() }
        let writer = try StoreFixture.openQueue(directory.url, suspended: true)
        let operations = (0..<batch).map { _ in StoredBenchmarkOperation(payload: .example) }
        sides.batchSeconds = [try Timing.seconds { _ = try writer.addOperations(operations) }]
        writer.close()
        sides.diskBytes = [allocatedBytes(under: directory.url.path)]

        var opened: PersistentOperationQueue?
        var report = RestoreReport()
        sides.restoreSeconds = [try Timing.seconds {
            let queue = try StoreFixture.openQueue(directory.url, suspended: true)
            opened = queue
            report = try queue.restore()
        }]
        guard let reader = opened else { throw BenchmarkFailure("the queue did not open") }
        defer { reader.close() }
        guard report.restored.count == batch else {
            throw BenchmarkFailure("restored \(report.restored.count) of \(batch) operations")
        }
        // Listing the operations builds each one from its record (decoding its payload).
        var built = 0
        sides.builtSeconds = [sides.restoreSeconds[0] + Timing.seconds { built = reader.operations().count }]
        guard built == batch else { throw BenchmarkFailure("built \(built) of \(batch) operations") }
        reader.operationQueue.isSuspended = false
        reader.waitUntilAllOperationsAreFinished()
        let counts = try reader.counts()
        guard counts.pending == 0, counts.failed == 0 else {
            throw BenchmarkFailure("after running the batch: \(counts.pending) pending, \(counts.failed) failed")
        }
        // Once compaction has run: closing waits for it (and for the start-over of a store
        // whose records have all gone), as an app's next launch would find the store.
        reader.close()
        sides.diskBytesAfter = [allocatedBytes(under: directory.url.path)]
        return sides
    }

    /// S1, S3, S4 and S5 on SQLite's side.
    static func sqliteRound(lifecycles: Int, batch: Int, payload: Data, synchronous: SQLiteDatabase.Synchronous) throws -> Sides {
        var sides = Sides()
        sides.lifecycleRates = [try sqliteLifecycles(lifecycles, synchronous: synchronous, runsOperations: true)]

        let directory = try TemporaryDirectory("s-sqlite")
        defer { directory.remove() }
        let path = directory.url.path + "/queue.sqlite"
        do {
            let database = try SQLiteDatabase(path: path, synchronous: synchronous)
            let encoder = PropertyListEncoder.binary
            sides.batchSeconds = [try Timing.seconds {
                try database.execute("BEGIN")
                for index in 0..<batch {
                    try database.insertOperation(id: "op-\(index)", payload: try encoder.encode(TypicalPayload.example))
                }
                try database.execute("COMMIT")
            }]
            try database.checkpoint()
        }
        do {
            let raw = try SQLiteDatabase(path: directory.url.path + "/raw.sqlite", synchronous: synchronous)
            sides.rawBatchSeconds = [try Timing.seconds {
                try raw.execute("BEGIN")
                for index in 0..<batch { try raw.insertOperation(id: "op-\(index)", payload: payload) }
                try raw.execute("COMMIT")
            }]
        }
        for name in ["raw.sqlite", "raw.sqlite-wal", "raw.sqlite-shm"] {
            try? FileManager.default.removeItem(atPath: directory.url.path + "/" + name)
        }
        sides.diskBytes = [allocatedBytes(under: directory.url.path)]
        let (seconds, count) = try sqliteRestore(path: path)
        guard count == batch else { throw BenchmarkFailure("SQLite restored \(count) of \(batch) rows") }
        sides.restoreSeconds = [seconds]
        sides.builtSeconds = [seconds]
        return sides
    }

    /// S1 on SQLite: `count` × (encode the payload, insert, delete), each change a commit;
    /// operations per second. `runsOperations`: between the insert and the delete, the same
    /// operation runs through an `OperationQueue` and is waited for, as a queue kept in SQLite
    /// runs its work (the lifecycle S1 measures on our side); otherwise the database alone.
    static func sqliteLifecycles(_ count: Int, synchronous: SQLiteDatabase.Synchronous, runsOperations: Bool) throws -> Double {
        let directory = try TemporaryDirectory("s1-sqlite")
        defer { directory.remove() }
        let database = try SQLiteDatabase(path: directory.url.path + "/queue.sqlite", synchronous: synchronous)
        let encoder = PropertyListEncoder.binary
        let queue = OperationQueue()
        let seconds = try Timing.seconds {
            for index in 0..<count {
                try database.insertOperation(id: "op-\(index)", payload: try encoder.encode(TypicalPayload.example))
                if runsOperations {
                    queue.addOperation(StoredBenchmarkOperation(payload: .example))
                    queue.waitUntilAllOperationsAreFinished()
                }
                try database.deleteOperation(id: "op-\(index)")
            }
        }
        return Double(count) / seconds
    }

    /// S4 on SQLite: open the database at `path`, select every row, decode each payload and
    /// build an operation from it; the time taken and the number of operations built.
    static func sqliteRestore(path: String) throws -> (seconds: Double, count: Int) {
        var operations: [StoredBenchmarkOperation] = []
        let seconds = try Timing.seconds {
            let database = try SQLiteDatabase(path: path, synchronous: .full)
            let decoder = PropertyListDecoder()
            try database.forEachOperation { _, payload in
                operations.append(StoredBenchmarkOperation(payload: try decoder.decode(TypicalPayload.self, from: payload)))
            }
        }
        return (seconds, operations.count)
    }

    /// S4 at `count` records, both sides once.
    static func largeRestore(_ count: Int, payload: Data) throws -> (ours: Double, sqlite: Double) {
        let ours = try TemporaryDirectory("s4-ours")
        defer { ours.remove() }
        try StoreFixture.fillInBatches(count, at: ours.url)
        var opened: PersistentOperationQueue?
        var report = RestoreReport()
        let restore = try Timing.seconds {
            let queue = try StoreFixture.openQueue(ours.url, suspended: true)
            opened = queue
            report = try queue.restore()
        }
        opened?.close()
        guard report.restored.count == count else { throw BenchmarkFailure("restored \(report.restored.count) of \(count)") }

        let sqlite = try TemporaryDirectory("s4-sqlite")
        defer { sqlite.remove() }
        let path = sqlite.url.path + "/queue.sqlite"
        do {
            let database = try SQLiteDatabase(path: path, synchronous: .full)
            try database.execute("BEGIN")
            for index in 0..<count { try database.insertOperation(id: "op-\(index)", payload: payload) }
            try database.execute("COMMIT")
            try database.checkpoint()
        }
        let (seconds, restored) = try sqliteRestore(path: path)
        guard restored == count else { throw BenchmarkFailure("SQLite restored \(restored) of \(count)") }
        return (restore, seconds)
    }

    /// The disk space taken by `path` and everything under it (allocated blocks).
    static func allocatedBytes(under path: String) -> Int {
        var status = stat()
        guard lstat(path, &status) == 0 else { return 0 }
        var total = Int(status.st_blocks) * 512
        if (status.st_mode & S_IFMT) == S_IFDIR {
            for name in (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? [] {
                total += allocatedBytes(under: path + "/" + name)
            }
        }
        return total
    }
}

extension PropertyListEncoder {
    /// An encoder of binary property lists, as the store encodes payloads.
    static var binary: PropertyListEncoder {
        let encoder = PropertyListEncoder()
        encoder.outputFormat = .binary
        return encoder
    }
}
