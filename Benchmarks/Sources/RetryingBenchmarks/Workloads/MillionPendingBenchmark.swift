import Foundation
import PersistentOperations

/// M: a backlog of a million pending operations — launch, memory, disk and the read-only
/// tools at that size (the million-pending issue's targets).
///
/// A store is filled through the public API with 1,000,000 pending operations of the
/// typical payload (`addOperations`, 10,000 at a time, a suspended queue), and SQLite with
/// the same rows (one transaction; WAL, `synchronous=FULL`). Then:
///
/// - **M1** restore, warm (the files were just written): a child process opens a queue on
///   the store (type registered, `OperationQueue` suspended) and times `restore()`; its peak
///   resident set is M1.rss. SQLite: open, select the columns a queue indexes at launch (id,
///   type, priority, enqueue date, retries; no payload) in run order, and build an entry
///   (a struct) for each row.
/// - **M2** disk for the pending operations (allocated blocks), against SQLite's database and
///   WAL after a checkpoint.
/// - **M3** `ReadOnlyPersistentStore.counts()` in a child process (what
///   `store-inspector stats` does for the pending area): time and peak memory.
/// - **M4** the peak memory of a process that added the million itself, its queue open.
///
/// - **M5** the latency of one durable add, the backlog restored (median of 200 adds one at
///   a time), against the same on a store of 100 pending.
/// - **M6** the drain rate: the first 8,000 operations to complete once the restored queue
///   runs (the median of 4 chunks of 2,000), against the same on a store of 10,000 pending.
///
/// A full run only: the smoke run uses 2,000 operations.
struct MillionPendingBenchmark: Benchmark {
    let id = "M"
    let title = "a million pending operations: restore, memory, disk, counts"

    /// An entry as a queue built on SQLite would keep it at launch.
    struct SQLiteEntry {
        var id: String
        var type: String
        var priority: Int
        var enqueued: Double
        var retries: Int
    }

    func run(in context: BenchmarkContext) throws -> [BenchmarkResult] {
        let count = context.size(full: 1_000_000, smoke: 2_000)
        let label = count.groupedDigits
        let directory = try TemporaryDirectory("m-ours")
        defer { directory.remove() }
        let sqliteDirectory = try TemporaryDirectory("m-sqlite")
        defer { sqliteDirectory.remove() }

        var start = Timing.now()
        try StoreFixture.fillInBatches(count, at: directory.url)
        context.progress(String(format: "stored %@ operations in %.1f s", label, Timing.seconds(from: start, to: Timing.now())))

        start = Timing.now()
        let path = sqliteDirectory.url.path + "/queue.sqlite"
        do {
            let database = try SQLiteDatabase(path: path, synchronous: .full)
            let payload = try PropertyListEncoder.binary.encode(TypicalPayload.example)
            try database.execute("BEGIN")
            for index in 0..<count { try database.insertOperation(id: "op-\(index)", payload: payload) }
            try database.execute("COMMIT")
            try database.checkpoint()
        }
        context.progress(String(format: "SQLite: inserted %@ rows in %.1f s", label, Timing.seconds(from: start, to: Timing.now())))

        let restore = try RestoreBenchmark.measureInChild(.restore, directory: directory.url, count: count)
        var entries: [SQLiteEntry] = []
        let sqliteRestore = try Timing.seconds {
            let database = try SQLiteDatabase(path: path, synchronous: .full)
            entries.reserveCapacity(count)
            try database.forEachEntry { entries.append(SQLiteEntry(id: $0, type: $1, priority: $2, enqueued: $3, retries: $4)) }
        }
        guard entries.count == count else { throw BenchmarkFailure("SQLite restored \(entries.count) of \(count) rows") }
        entries = []
        context.progress(String(format: "restore: %.2f s (peak %.0f MB) vs SQLite %.2f s", restore.seconds, restore.peakMegabytes, sqliteRestore))

        let disk = SQLiteComparisonBenchmark.allocatedBytes(under: directory.url.path)
        let sqliteDisk = SQLiteComparisonBenchmark.allocatedBytes(under: sqliteDirectory.url.path)
        let counts = try RestoreBenchmark.measureInChild(.counts, directory: directory.url, count: count)
        context.progress(String(format: "counts(): %.2f s (peak %.0f MB)", counts.seconds, counts.peakMegabytes))

        let added = try TemporaryDirectory("m-added")
        defer { added.remove() }
        let adding = try RestoreBenchmark.measureInChild(.add, directory: added.url, count: count)
        context.progress(String(format: "added in one process: %.1f s (peak %.0f MB)", adding.seconds, adding.peakMegabytes))

        // M5 and M6: the same measurements on the backlog and on a small store (the latency
        // child adds to the backlog: the drain that follows restores those too).
        let small = try TemporaryDirectory("m-small")
        defer { small.remove() }
        let smallCount = min(100, count)
        let drainBaselineCount = min(10_000, count)
        try StoreFixture.fillInBatches(smallCount, at: small.url)
        let drainBaseline = try TemporaryDirectory("m-drain")
        defer { drainBaseline.remove() }
        try StoreFixture.fillInBatches(drainBaselineCount, at: drainBaseline.url)
        let latency = try RestoreBenchmark.measureInChild(.latency, directory: directory.url, count: count)
        let smallLatency = try RestoreBenchmark.measureInChild(.latency, directory: small.url, count: smallCount)
        context.progress(String(format: "add latency: %.2f ms at %@ pending vs %.2f ms at %d", latency.seconds * 1000, label, smallLatency.seconds * 1000, smallCount))
        let chunk = RestoreBenchmark.drainedOperations(of: count) / RestoreBenchmark.drainChunks
        let drain = try RestoreBenchmark.measureInChild(.drain, directory: directory.url, count: count)
        let baselineChunk = RestoreBenchmark.drainedOperations(of: drainBaselineCount) / RestoreBenchmark.drainChunks
        let drainBaselineRun = try RestoreBenchmark.measureInChild(.drain, directory: drainBaseline.url, count: drainBaselineCount)
        let drainRate = Double(chunk) / drain.seconds
        let baselineDrainRate = Double(baselineChunk) / drainBaselineRun.seconds
        context.progress(String(format: "drain: %.0f ops/s at %@ pending vs %.0f at %@", drainRate, label, baselineDrainRate, drainBaselineCount.groupedDigits))

        let startup = String(format: "a process that only starts up: %.1f MB", restore.startMegabytes)
        return [
            BenchmarkResult(
                id: "M1", name: "restore of \(label) pending, warm", value: restore.seconds, unit: .seconds,
                baseline: sqliteRestore, baselineName: "SQLite: open, select the indexed columns, build entries",
                target: .ratio(atMost: 1), note: "child process, OperationQueue suspended; target also ≤ 3 s (M1.abs)"
            ),
            BenchmarkResult(
                id: "M1.abs", name: "the same, absolute", value: restore.seconds, unit: .seconds,
                target: .value(atMost: 3), note: "\(Int(Double(count) / restore.seconds).groupedDigits) records/s"
            ),
            BenchmarkResult(
                id: "M1.rss", name: "peak memory, restore of \(label)", value: restore.peakMegabytes, unit: .megabytes,
                target: .value(atMost: 250), note: startup
            ),
            BenchmarkResult(
                id: "M2", name: "disk taken by \(label) pending", value: Double(disk), unit: .bytes,
                baseline: Double(sqliteDisk), baselineName: "SQLite database and WAL, after a checkpoint",
                target: .ratio(atMost: 1.5), note: "allocated blocks of every file; \(disk / max(count, 1)) B a record"
            ),
            BenchmarkResult(
                id: "M3", name: "ReadOnlyPersistentStore.counts() of \(label)", value: counts.seconds, unit: .seconds,
                target: .value(atMost: 2), note: "child process, a new view; counted from the journal's index, as store-inspector stats counts (no record decoded)"
            ),
            BenchmarkResult(
                id: "M3.rss", name: "peak memory, counts() of \(label)", value: counts.peakMegabytes, unit: .megabytes,
                target: .value(atMost: 100), note: startup
            ),
            BenchmarkResult(
                id: "M4", name: "peak memory, a process that added \(label)", value: adding.peakMegabytes, unit: .megabytes,
                target: .value(atMost: 250), note: String(format: "its queue open; adding took %.1f s", adding.seconds)
            ),
            BenchmarkResult(
                id: "M5", name: "one durable add, \(label) pending", value: latency.seconds, unit: .seconds,
                baseline: smallLatency.seconds, baselineName: "the same with \(smallCount) pending",
                target: .ratio(atMost: 1.2), note: "median of \(RestoreBenchmark.latencySamples) adds one at a time, after restore(), queue suspended"
            ),
            BenchmarkResult(
                id: "M6", name: "drain rate, \(label) pending", value: drainRate, unit: .operationsPerSecond,
                baseline: baselineDrainRate, baselineName: "the same with \(drainBaselineCount.groupedDigits) pending",
                target: .ratio(atLeast: 0.9), note: "the first \((chunk * RestoreBenchmark.drainChunks).groupedDigits) to complete after restore(), unsuspended, median of \(RestoreBenchmark.drainChunks) chunks"
            ),
        ]
    }
}
