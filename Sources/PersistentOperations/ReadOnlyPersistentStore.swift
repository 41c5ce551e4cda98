import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A read-only view of a store directory: lists, shows and counts its records while another
/// process — or a ``PersistentOperationQueue`` in this one — holds the store.
///
/// It takes no lock and never writes: no file is created, changed, moved or deleted, not even
/// a corrupt one (it is reported in ``RecordList/unreadable`` and left for the queue that
/// opens the store to quarantine). `store-inspector`'s reading commands use it. Each call
/// reads the directory afresh; a store changing meanwhile may be seen halfway through a
/// change (a record being moved to the failed area can be missed or seen twice).
///
/// ```swift
/// let store = try ReadOnlyPersistentStore(directory: storeURL)
/// let pending = try store.pendingRecords()
/// for record in pending.records {
///     print(record.id, record.typeIdentifier, record.state.map { "\($0)" } ?? "-", record.numberOfAttempts)
/// }
/// for entry in pending.unreadable { print("unreadable \(entry.name): \(entry.reason)") }
/// if let failed = try store.record(withID: id), failed.area == .failed {
///     print("failed: \(failed.failureReason ?? "-")")
/// }
/// print(try store.counts())
/// ```
///
/// To change a store — re-queue or purge failed records — open it with a
/// ``PersistentOperationQueue``, which takes its lock.
///
/// Thread safety: every method may be called from any thread.
public final class ReadOnlyPersistentStore: Sendable {
    /// What reading one area found: its records and the entries that could not be read.
    public struct RecordList: Sendable, Hashable {
        /// The readable records. Pending records are in run order (priority, then enqueue
        /// order); failed ones in enqueue order.
        public var records: [StoredOperationRecord]
        /// Entries that are not usable records, left in place.
        public var unreadable: [UnreadableEntry]
    }

    /// An entry of the store that is not a usable record.
    public struct UnreadableEntry: Sendable, Hashable {
        /// The entry's file name in its area.
        public var name: String
        /// Why it cannot be used, for people.
        public var reason: String
        /// The kind of problem, such as ``PersistenceError/Code/corruptRecord``.
        public var code: PersistenceError.Code
    }

    /// An entry of the quarantine area, with the reason it was moved there when one was
    /// recorded.
    public struct QuarantinedEntry: Sendable, Hashable {
        /// The entry's name in the quarantine area.
        public var name: String
        /// Why it was quarantined.
        public var reason: String?
    }

    /// How many records the store holds, by area.
    public struct Counts: Sendable, Hashable {
        /// Readable pending records.
        public var pending = 0
        /// Pending records running an attempt (``PersistentOperationInfo/State/running``).
        public var running = 0
        /// Readable failed records.
        public var failed = 0
        /// Entries of the quarantine area.
        public var quarantined = 0
        /// Entries of the pending and failed areas that cannot be read.
        public var unreadable = 0
        /// Readable pending records by type identifier.
        public var pendingByType: [String: Int] = [:]
        /// Readable failed records by type identifier.
        public var failedByType: [String: Int] = [:]
        /// Readable pending records of periodic operations (``EnqueueOptions/repeating``): one
        /// per series.
        public var periodic = 0
        /// Readable pending records of periodic operations by type identifier.
        public var periodicByType: [String: Int] = [:]
    }

    /// The process a store's lock file names: the last process that opened the store for
    /// writing.
    public struct LockHolder: Sendable, Hashable {
        /// Its process identifier.
        public var processIdentifier: Int32
        /// Whether a process with that identifier runs now (then it most likely holds the store).
        public var isRunning: Bool
    }

    /// The store directory.
    public let directory: URL
    let store: RecordStore

    /// Opens the store at `directory` for reading, without taking its lock.
    ///
    /// ```swift
    /// let store = try ReadOnlyPersistentStore(directory: storeURL)
    /// ```
    ///
    /// - Throws: ``PersistenceError/Code/directoryUnavailable`` when `directory` does not exist.
    public init(directory: URL) throws {
        self.directory = directory
        self.store = try RecordStore(directory: directory, access: .readOnly)
    }

    /// The pending records, in run order, and the pending entries that cannot be read.
    ///
    /// ```swift
    /// for record in try store.pendingRecords().records where record.state == .running {
    ///     print("\(record.id) is running attempt \(record.numberOfAttempts)")
    /// }
    /// ```
    ///
    /// - Throws: ``PersistenceError`` when the area cannot be listed.
    public func pendingRecords() throws -> RecordList {
        try store.withReadSnapshot { try readPendingRecords() }
    }

    private func readPendingRecords() throws -> RecordList {
        let report = try store.loadPending()
        let stored = pendingRecordView()
        return RecordList(
            records: StoredOperationRecord.linkingGraph(of: report.records.map(stored)),
            unreadable: report.skipped.map(UnreadableEntry.init)
        )
    }

    /// Runs `body` with the reads it makes of this store served by one reading of the
    /// journal (each public call otherwise reads it afresh, to see the holder's latest
    /// changes): for a tool that makes several calls that belong together.
    ///
    /// ```swift
    /// let view = try ReadOnlyPersistentStore(directory: URL(fileURLWithPath: "/var/app/store"))
    /// let (pending, failed) = try view.withSnapshot { (try view.counts().pending, try view.failedRecords().records.count) }
    /// ```
    package func withSnapshot<T>(_ body: () throws -> T) throws -> T {
        try store.withReadSnapshot(body)
    }

    /// Makes the view of a pending record: with what its attempt marker says, and whether a
    /// process holds the store, as of now.
    func pendingRecordView() -> (OperationRecord) -> StoredOperationRecord {
        let evidence = store.attemptEvidence()
        let isStoreHeld = isHeldByAProcess
        let now = Date()
        return { StoredOperationRecord($0, area: .pending, isStoreHeld: isStoreHeld, now: now, evidence: evidence[$0.id]) }
    }

    /// Hands each readable pending record to `body` as it is read, in no particular order,
    /// and returns the pending entries that cannot be read: what ``pendingRecords()`` lists,
    /// without holding every record at once (a store of a million records fits in the
    /// journal's index, not in a list of records).
    ///
    /// A record's ``StoredOperationRecord/state`` here is never
    /// ``PersistentOperationInfo/State/waitingForPrerequisites``, which takes the other
    /// records to tell; ``pendingRecords()`` sets it.
    ///
    /// ```swift
    /// let view = try ReadOnlyPersistentStore(directory: URL(fileURLWithPath: "/var/app/store"))
    /// var running = 0
    /// _ = try view.forEachPendingRecord { if $0.state == .running { running += 1 } }
    /// ```
    package func forEachPendingRecord(_ body: (StoredOperationRecord) throws -> Void) throws -> [UnreadableEntry] {
        try store.withReadSnapshot {
            let stored = pendingRecordView()
            let report = try store.loadPending { try body(stored($0)) }
            return report.skipped.map(UnreadableEntry.init)
        }
    }

    /// The failed records and the failed entries that cannot be read.
    ///
    /// ```swift
    /// for record in try store.failedRecords().records {
    ///     print(record.id, record.failureReason ?? "-")
    /// }
    /// ```
    ///
    /// - Throws: ``PersistenceError`` when the area cannot be listed.
    public func failedRecords() throws -> RecordList {
        let report = try store.loadFailed()
        let now = Date()
        return RecordList(
            records: report.records.map { StoredOperationRecord($0, area: .failed, isStoreHeld: false, now: now) },
            unreadable: report.skipped.map(UnreadableEntry.init)
        )
    }

    /// The pending or failed record with identifier `id`, or `nil` when there is none (or it
    /// cannot be read: see ``pendingRecords()``).
    ///
    /// ```swift
    /// if let id = PersistentOperationID("6f1c…"), let record = try store.record(withID: id) {
    ///     print(record.area, record.typeIdentifier)
    /// }
    /// ```
    public func record(withID id: PersistentOperationID) throws -> StoredOperationRecord? {
        try store.withReadSnapshot {
            if let record = try readPendingRecords().records.first(where: { $0.id == id }) { return record }
            return try failedRecords().records.first { $0.id == id }
        }
    }

    /// The entries of the quarantine area, sorted by name.
    ///
    /// ```swift
    /// for entry in try store.quarantinedEntries() { print(entry.name, entry.reason ?? "-") }
    /// ```
    public func quarantinedEntries() throws -> [QuarantinedEntry] {
        try store.quarantinedEntries().map { QuarantinedEntry(name: $0.name, reason: $0.reason) }
    }

    /// How many records each area holds.
    ///
    /// A store whose records live in its journal is counted from the journal's index, read
    /// once: no record is decoded, so a million pending records are counted in the time it
    /// takes to read the journal. A record whose frame is intact but whose fields cannot be
    /// decoded (which only damage behind a valid checksum makes) counts as pending here, and
    /// as unreadable in ``pendingRecords()``. A store not migrated to the journal yet is
    /// counted record by record.
    ///
    /// ```swift
    /// let counts = try store.counts()
    /// print("\(counts.pending) pending (\(counts.running) running), \(counts.failed) failed")
    /// ```
    public func counts() throws -> Counts {
        try store.withReadSnapshot { try readCounts() }
    }

    private func readCounts() throws -> Counts {
        try readCounts(index: try store.indexCounts())
    }

    /// The counts, from `index` when the store's records all live in its journal.
    private func readCounts(index: RecordStore.IndexSummary?) throws -> Counts {
        var counts = Counts()
        if let index {
            // A journal store: from its index, no record read (a million records in seconds
            // and the memory of the index). Running: in flight by the record's own count or
            // its marker or suspect file, while a process holds the store.
            counts.pending = index.counts.pending
            counts.pendingByType = index.counts.pendingByType
            counts.failed = index.counts.failed
            counts.failedByType = index.counts.failedByType
            counts.periodic = index.counts.periodic
            counts.periodicByType = index.counts.periodicByType
            if isHeldByAProcess {
                var running = index.counts.pendingWithAttemptsInFlight
                for (id, evidence) in store.attemptEvidence() where evidence.interruptedAttempts > 0 && index.isPending(id) {
                    running.insert(id)
                }
                counts.running = running.count
            }
            counts.unreadable = index.unreadable.count
        } else {
            counts = try summaryRecordByRecord(now: Date()).counts
        }
        counts.quarantined = try store.quarantinedEntryNames().count
        return counts
    }

    /// The counts (but the quarantined entries), the next due date and the entries that
    /// cannot be read of a store not migrated to the journal yet, read one record at a time:
    /// the counts of a large store, not its records, are kept.
    private func summaryRecordByRecord(now: Date) throws -> (counts: Counts, nextDueDate: Date?, pendingUnreadable: [UnreadableEntry], failedUnreadable: [UnreadableEntry]) {
        var counts = Counts()
        var nextDue: Date?
        let unreadable = try forEachPendingRecord { record in
            counts.pending += 1
            if record.state == .running { counts.running += 1 }
            counts.pendingByType[record.typeIdentifier, default: 0] += 1
            if record.repeating != nil {
                counts.periodic += 1
                counts.periodicByType[record.typeIdentifier, default: 0] += 1
            }
            let due = max(record.dueDate ?? now, now)
            nextDue = min(nextDue ?? due, due)
        }
        let failed = try failedRecords()
        counts.failed = failed.records.count
        counts.unreadable = unreadable.count + failed.unreadable.count
        for record in failed.records { counts.failedByType[record.typeIdentifier, default: 0] += 1 }
        return (counts, nextDue, unreadable, failed.unreadable)
    }

    /// The earliest moment a pending record becomes due, as its dates tell: `now` when one is
    /// due already, `nil` when there are no readable pending records.
    ///
    /// Each pending record counts from its ``StoredOperationRecord/dueDate`` (the later of its
    /// not-before and next-attempt dates; for a periodic operation waiting for its next
    /// period, the start of that period's window), and a date already past counts as `now`.
    /// Failed records and unreadable entries do not count. A store whose records live in its
    /// journal answers from the journal's index, which keeps each record's due date: no record
    /// is decoded (as with ``counts()``, a record whose frame is intact but whose fields cannot
    /// be decoded counts).
    ///
    /// A read-only view cannot see prerequisites or run conditions as a live queue does: every
    /// pending record counts by its dates alone — one waiting for a prerequisite or running an
    /// attempt included — so the result may be earlier than the live queue's
    /// ``PersistentOperationQueue/nextDueDate``, which leaves those out.
    ///
    /// ```swift
    /// let store = try ReadOnlyPersistentStore(directory: storeURL)
    /// if let next = try store.nextDueDate() {
    ///     print("next work is due at \(next)")
    /// } else {
    ///     print("no pending work")
    /// }
    /// ```
    ///
    /// - Parameter now: The current moment; records due before it are due at `now`.
    /// - Throws: ``PersistenceError`` when the pending area cannot be listed.
    public func nextDueDate(now: Date = Date()) throws -> Date? {
        if let index = try store.indexCounts() {
            // A journal store: from its index, which keeps each record's due date.
            return index.counts.earliestDueDate.map { max($0, now) }
        }
        var earliest: Date?
        _ = try forEachPendingRecord { record in
            let due = max(record.dueDate ?? now, now)
            earliest = min(earliest ?? due, due)
        }
        return earliest
    }

    /// What `store-inspector stats` shows: the counts, the next due date and the pending and
    /// failed entries that cannot be read, in one reading of the store. A journal store's come
    /// from its index, with no record decoded; a store not migrated yet is read record by record.
    package func summary(now: Date = Date()) throws -> (counts: Counts, nextDueDate: Date?, pendingUnreadable: [UnreadableEntry], failedUnreadable: [UnreadableEntry]) {
        try store.withReadSnapshot {
            guard let index = try store.indexCounts() else {
                var summary = try summaryRecordByRecord(now: now)
                summary.counts.quarantined = try store.quarantinedEntryNames().count
                return summary
            }
            return (try readCounts(index: index), index.counts.earliestDueDate.map { max($0, now) }, index.unreadable.map(UnreadableEntry.init), [])
        }
    }

    /// The process the store's lock file names, or `nil` when there is none. Reading the file
    /// takes no lock; a process that is not running only says who held the store last.
    ///
    /// ```swift
    /// if let holder = store.lockHolder, holder.isRunning { print("in use by \(holder.processIdentifier)") }
    /// ```
    public var lockHolder: LockHolder? {
        guard let text = try? String(contentsOf: URL(fileURLWithPath: store.layout.lockPath), encoding: .utf8),
              let pid = Int32(text.trimmingCharacters(in: .whitespacesAndNewlines)), pid > 0 else { return nil }
        return LockHolder(processIdentifier: pid, isRunning: kill(pid, 0) == 0 || errno == EPERM)
    }
}

extension ReadOnlyPersistentStore {
    /// Whether a process holds the store's lock now. On Linux, `/proc/locks` says so without
    /// taking the lock (a `flock` on the lock file's inode); elsewhere the process the lock
    /// file names must be running.
    var isHeldByAProcess: Bool {
        #if os(Linux)
        return Self.isFlockHeld(onLockFile: store.layout.lockPath, lockTable: try? String(contentsOfFile: "/proc/locks", encoding: .utf8))
        #else
        return lockHolder?.isRunning == true
        #endif
    }

    #if os(Linux)
    /// Whether a process holds a `flock` on the lock file at `path`: listed in `lockTable`
    /// (the text of `/proc/locks`), or else in the descriptors of the process the file names.
    static func isFlockHeld(onLockFile path: String, lockTable: String?) -> Bool {
        var status = stat()
        guard stat(path, &status) == 0 else { return false }
        let device = UInt64(status.st_dev)
        let major = ((device >> 8) & 0xfff) | ((device >> 32) & ~UInt64(0xfff))
        let minor = (device & 0xff) | ((device >> 12) & ~UInt64(0xff))
        // "1: FLOCK  ADVISORY  WRITE 4242 08:01:1234 0 EOF": device in hex, inode in decimal.
        let target = String(format: "%02llx:%02llx:%llu", major, minor, UInt64(status.st_ino))
        if let lockTable, lockTable.split(separator: "\n").contains(where: { isFlockLine($0, of: target) }) {
            return true
        }
        // The kernel makes that table as it is read, a page per read: when a lock listed before
        // ours is released between two reads, our line can be skipped, and a store held would
        // read as free. The descriptors of the process the lock file names say it for sure.
        guard let text = try? String(contentsOfFile: path, encoding: .utf8),
              let holder = Int32(text.trimmingCharacters(in: .whitespacesAndNewlines)), holder > 0 else { return false }
        let descriptors = "/proc/\(holder)/fd"
        for name in (try? FileManager.default.contentsOfDirectory(atPath: descriptors)) ?? [] {
            var opened = stat()
            guard stat(descriptors + "/" + name, &opened) == 0, opened.st_dev == status.st_dev, opened.st_ino == status.st_ino,
                  let info = try? String(contentsOfFile: "/proc/\(holder)/fdinfo/\(name)", encoding: .utf8) else { continue }
            // "lock:\t1: FLOCK  ADVISORY  WRITE 4242 08:01:1234 0 EOF"
            if info.split(separator: "\n").contains(where: { $0.hasPrefix("lock:") && isFlockLine($0, of: target) }) {
                return true
            }
        }
        return false
    }
    #endif

    /// Whether `line` of a lock table names a `flock` on the file `target` ("major:minor:inode").
    private static func isFlockLine(_ line: Substring, of target: String) -> Bool {
        let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
        return fields.contains("FLOCK") && fields.contains { $0 == target }
    }

}

extension ReadOnlyPersistentStore.UnreadableEntry {
    init(_ entry: LoadReport.Entry) {
        self.init(name: entry.name, reason: entry.reason, code: entry.code)
    }
}
