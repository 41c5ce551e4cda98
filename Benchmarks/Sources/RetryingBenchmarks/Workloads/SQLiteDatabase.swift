import CSQLite
import Foundation

/// The least of the SQLite C API the store comparisons (S1–S5) need: a connection, prepared
/// statements, and the one table a work queue built on SQLite keeps — one row per operation
/// with its payload as a blob, as KTBTaskQueue (through FMDB), the TaskQueueService (through
/// WCDB) and Android's WorkManager (through Room) store theirs.
///
/// ```swift
/// let database = try SQLiteDatabase(path: directory.path + "/queue.sqlite", synchronous: .full)
/// try database.insertOperation(id: "1", payload: payload)
/// ```
final class SQLiteDatabase {
    /// `PRAGMA synchronous` in WAL mode: `full` flushes the WAL at every commit (durable
    /// against a power cut, as the store's default level); `normal` flushes only at
    /// checkpoints (survives a process crash, not a power cut: Core Data's default).
    enum Synchronous: String {
        case full = "FULL"
        case normal = "NORMAL"
    }

    private var handle: OpaquePointer?
    private var insert: OpaquePointer?
    private var delete: OpaquePointer?
    let path: String

    /// Opens (creating) the database at `path` in WAL mode with `synchronous`, and creates the
    /// operations table.
    init(path: String, synchronous: Synchronous) throws {
        self.path = path
        guard sqlite3_open_v2(path, &handle, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nil) == SQLITE_OK else {
            throw failure("open")
        }
        try execute("PRAGMA journal_mode=WAL")
        try execute("PRAGMA synchronous=\(synchronous.rawValue)")
        try execute("""
            CREATE TABLE IF NOT EXISTS operations (
                id TEXT PRIMARY KEY NOT NULL, type TEXT NOT NULL, priority INTEGER NOT NULL,
                enqueued REAL NOT NULL, retries INTEGER NOT NULL, payload BLOB NOT NULL)
            """)
        insert = try prepare("INSERT INTO operations (id, type, priority, enqueued, retries, payload) VALUES (?, ?, 0, ?, 0, ?)")
        delete = try prepare("DELETE FROM operations WHERE id = ?")
    }

    deinit {
        sqlite3_finalize(insert)
        sqlite3_finalize(delete)
        sqlite3_close_v2(handle)
    }

    /// Runs `sql`, which returns no rows.
    func execute(_ sql: String) throws {
        guard sqlite3_exec(handle, sql, nil, nil, nil) == SQLITE_OK else { throw failure(sql) }
    }

    /// Inserts the row of one operation (in a transaction of its own unless one is open).
    func insertOperation(id: String, payload: Data) throws {
        sqlite3_bind_text(insert, 1, id, -1, Self.transient)
        sqlite3_bind_text(insert, 2, "benchmarks.typical-payload", -1, Self.transient)
        sqlite3_bind_double(insert, 3, Date().timeIntervalSinceReferenceDate)
        _ = payload.withUnsafeBytes { sqlite3_bind_blob(insert, 4, $0.baseAddress, Int32($0.count), Self.transient) }
        try stepToEnd(insert, "insert")
    }

    /// Deletes the row of one operation.
    func deleteOperation(id: String) throws {
        sqlite3_bind_text(delete, 1, id, -1, Self.transient)
        try stepToEnd(delete, "delete")
    }

    /// Calls `body` with the id and payload bytes of every row, in enqueue order.
    func forEachOperation(_ body: (String, Data) throws -> Void) throws {
        try forEachRow("SELECT id, payload FROM operations ORDER BY priority DESC, enqueued") { row in
            let id = String(cString: sqlite3_column_text(row, 0))
            let count = Int(sqlite3_column_bytes(row, 1))
            let payload = count == 0 ? Data() : Data(bytes: sqlite3_column_blob(row, 1), count: count)
            try body(id, payload)
        }
    }

    /// Calls `body` with the columns a queue indexes at launch (id, type, priority, enqueue
    /// date, retries) of every row, in run order: no payload.
    func forEachEntry(_ body: (_ id: String, _ type: String, _ priority: Int, _ enqueued: Double, _ retries: Int) throws -> Void) throws {
        try forEachRow("SELECT id, type, priority, enqueued, retries FROM operations ORDER BY priority DESC, enqueued") { row in
            try body(
                String(cString: sqlite3_column_text(row, 0)), String(cString: sqlite3_column_text(row, 1)),
                Int(sqlite3_column_int64(row, 2)), sqlite3_column_double(row, 3), Int(sqlite3_column_int64(row, 4))
            )
        }
    }

    /// Runs the query `sql` and calls `body` with the statement at each row.
    private func forEachRow(_ sql: String, _ body: (OpaquePointer?) throws -> Void) throws {
        let select = try prepare(sql)
        defer { sqlite3_finalize(select) }
        while true {
            let result = sqlite3_step(select)
            if result == SQLITE_DONE { return }
            guard result == SQLITE_ROW else { throw failure("select") }
            try body(select)
        }
    }

    /// Moves the WAL's contents into the database file and truncates the WAL, as a checkpoint
    /// after the app's work leaves it.
    func checkpoint() throws {
        try execute("PRAGMA wal_checkpoint(TRUNCATE)")
    }

    private func prepare(_ sql: String) throws -> OpaquePointer? {
        var statement: OpaquePointer?
        guard sqlite3_prepare_v2(handle, sql, -1, &statement, nil) == SQLITE_OK else { throw failure(sql) }
        return statement
    }

    private func stepToEnd(_ statement: OpaquePointer?, _ what: String) throws {
        defer {
            sqlite3_reset(statement)
            sqlite3_clear_bindings(statement)
        }
        guard sqlite3_step(statement) == SQLITE_DONE else { throw failure(what) }
    }

    private func failure(_ what: String) -> BenchmarkFailure {
        BenchmarkFailure("SQLite \(what) failed: \(String(cString: sqlite3_errmsg(handle)))")
    }

    /// `SQLITE_TRANSIENT`: SQLite copies the bound bytes.
    private static let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)
}
