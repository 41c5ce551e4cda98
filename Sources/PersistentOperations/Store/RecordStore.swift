import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The crash-safe store of operation records in one directory.
///
/// Records live in the store's journal (``JournalStore``: `journal/` segments of frames, one
/// flush per commit shared among concurrent callers); crash evidence (`attempts/`) and the
/// quarantine area are files beside it. A store written in the earlier layout of one file per
/// record (`pending/`, `failed/`, `batches/`, formats 1–4) is migrated to the journal when a
/// read-write store opens it; see ``migrateFilesToJournal()``. ``Configuration/engine``
/// `.files` keeps that earlier layout (tests build migration sources with it).
///
/// A read-write store holds an exclusive lock on the directory, so a second read-write open,
/// in this process or another, throws ``PersistenceError/Code/locked``; a read-only store
/// takes no lock and never writes.
///
/// ```swift
/// let store = try RecordStore(directory: directory)
/// let report = try store.loadPending()
/// var record = OperationRecord(typeIdentifier: "upload", payload: payload,
///                              enqueueSequence: store.nextEnqueueSequence())
/// try store.add(record)
/// record.numberOfRetries += 1
/// try store.update(record)
/// try store.removePending(id: record.id)
/// ```
///
/// Thread safety: every method may be called from any thread. Changes to different records
/// run concurrently; the caller serialises changes to one record (the queue runs one
/// operation per record).
package final class RecordStore: Sendable {
    /// Whether a store may change its directory.
    package enum Access: Sendable {
        /// Takes the directory's lock; adds, updates, removes and quarantines.
        case readWrite
        /// Takes no lock and never writes, for inspecting a store another process may hold.
        case readOnly
    }

    /// How a store keeps its records.
    package enum Engine: Sendable {
        /// An append-only journal (``JournalStore``), the default; stores of the earlier
        /// layout are migrated to it at a read-write open.
        case journal
        /// One file per record, the layout of formats 1–4: kept so that tests can write
        /// stores to migrate, and to read stores not migrated yet.
        case files
    }

    /// Settings of a store.
    package struct Configuration: Sendable {
        /// The largest record file written or read, in bytes. Default: 1 MiB
        /// (``RecordFormat/defaultMaximumRecordSize``).
        package var maximumRecordSize: Int
        /// The file system calls go through. Default: ``FileSystem/system``.
        package var fileSystem: FileSystem
        /// How records are kept. Default: ``Engine/journal``.
        package var engine: Engine
        /// How durable a change of the journal is when it returns. Default:
        /// ``JournalStore/Durability/flushed``.
        package var durability: JournalStore.Durability
        /// Whether removals are flushed before they return. Default: `false`.
        package var strictRemovals: Bool
        /// How long a removal waits at most for a flush. Default: 50 ms.
        package var flushDelay: TimeInterval
        /// How long the journal remembers the idempotency key of a removed record. Default: 300 s.
        package var idempotencyWindow: TimeInterval = 300
        /// The clock that dates what the journal remembers. Default: the system clock.
        package var clock: @Sendable () -> Date = { Date() }

        /// Creates settings.
        package init(
            maximumRecordSize: Int = RecordFormat.defaultMaximumRecordSize, fileSystem: FileSystem = .system,
            engine: Engine = .journal, durability: JournalStore.Durability = .flushed, strictRemovals: Bool = false,
            flushDelay: TimeInterval = JournalWriter.defaultFlushDelay, idempotencyWindow: TimeInterval = 300,
            clock: @escaping @Sendable () -> Date = { Date() }
        ) {
            self.idempotencyWindow = idempotencyWindow
            self.clock = clock
            precondition(maximumRecordSize > RecordFormat.headerSize, "maximumRecordSize must exceed the record header size")
            self.maximumRecordSize = maximumRecordSize
            self.fileSystem = fileSystem
            self.engine = engine
            self.durability = durability
            self.strictRemovals = strictRemovals
            self.flushDelay = flushDelay
        }

        /// The journal's settings for a store of `access`.
        func journalConfiguration(readOnly: Bool) -> JournalStore.Configuration {
            var configuration = JournalStore.Configuration(
                durability: durability, strictRemovals: strictRemovals, flushDelay: flushDelay,
                maximumRecordSize: maximumRecordSize, fileSystem: fileSystem, isReadOnly: readOnly
            )
            configuration.idempotencyWindow = idempotencyWindow
            configuration.clock = clock
            return configuration
        }
    }

    /// The mutable state of a store.
    struct State: Sendable {
        var isClosed = false
        /// Why changes are refused since the lock was found taken by another process after a
        /// suspension (see ``resumeLock()``).
        var lostLock: PersistenceError?
        /// The last enqueue sequence handed out or seen on disk.
        var lastEnqueueSequence: UInt64 = 0
        /// The areas whose records on disk `lastEnqueueSequence` accounts for: those read
        /// by a load or by the scan of ``nextEnqueueSequence()``.
        var areasWithKnownEnqueueSequences: Set<StoreLayout.Area> = []
        /// What open found that a load reports: damage the journal's open quarantined and
        /// what migration quarantined, reported by the first load of pending records.
        var openFindings: [LoadReport.Entry] = []
        /// Files of the earlier layout that stay where they are (records of a newer format
        /// version), reported by every load of pending records.
        var filesLeft: [LoadReport.Entry] = []
        /// Records of uncommitted batches the migration dropped, for the first restore to report.
        var discardedByMigration: [String] = []
        /// A read-only store's journal as one opening read it, while calls of
        /// ``withReadSnapshot(_:)`` use it (`users` of them).
        var readSnapshot: (journal: JournalStore, filesToo: Bool, users: Int)?
    }

    /// The store directory.
    package let directory: URL
    /// Whether this store may write.
    package let access: Access
    let configuration: Configuration
    let layout: StoreLayout
    let file: DurableFile
    let state = Locked(State())
    private let lock: StoreLock?
    /// Counts the changes under way, so that ``close()`` can wait for them.
    private let changes = ChangeGate()
    private let synchronizers: [StoreLayout.Area: DirectorySynchronizer]
    /// The journal holding the records, for ``Engine/journal``.
    let journal: JournalStore?

    /// Opens the store at `directory`, creating it (mode 0700) for a read-write store.
    ///
    /// A read-write open also removes temporary files that interrupted writes left behind.
    ///
    /// - Throws: ``PersistenceError/Code/locked`` when another read-write store holds the
    ///   directory; ``PersistenceError/Code/directoryUnavailable`` when it cannot be created
    ///   or, for a read-only store, does not exist.
    package init(directory: URL, access: Access = .readWrite, configuration: Configuration = Configuration()) throws {
        self.directory = directory
        self.access = access
        self.configuration = configuration
        self.layout = StoreLayout(directory: directory)
        self.file = DurableFile(fileSystem: configuration.fileSystem)
        let fileSystem = configuration.fileSystem
        var synchronizers: [StoreLayout.Area: DirectorySynchronizer] = [:]
        for area in StoreLayout.Area.allCases {
            synchronizers[area] = DirectorySynchronizer(path: layout.path(of: area), fileSystem: fileSystem)
        }
        self.synchronizers = synchronizers
        switch access {
        case .readWrite:
            // A journal store has no use for the earlier layout's areas (a store migrated keeps them, empty).
            try layout.createDirectories(fileSystem: fileSystem, areas: configuration.engine == .journal ? [.quarantine, .attempts] : StoreLayout.Area.allCases)
            let lock = try StoreLock(path: layout.lockPath, fileSystem: fileSystem)
            do {
                journal = configuration.engine == .journal
                    ? try JournalStore(directory: directory, configuration: configuration.journalConfiguration(readOnly: false)) : nil
            } catch {
                lock.release()
                throw error
            }
            self.lock = lock
            removeTemporaryFiles()
            if journal != nil {
                try migrateFilesToJournal()
            }
        case .readOnly:
            guard (try? fileSystem.linkStatus(layout.root))?.kind == .directory else {
                throw PersistenceError(.directoryUnavailable, "There is no store directory here.", fileURL: directory)
            }
            lock = nil
            // Each read opens the journal afresh (see `readableJournal()`), to follow the
            // changes of the process that holds the store; opening it here as well would read
            // every segment once more for nothing. A journal that cannot be listed fails now;
            // a segment that cannot be read (or of a newer format) fails the reads.
            journal = nil
            let journalPath = layout.root + "/journal"
            if configuration.engine == .journal, (try? fileSystem.linkStatus(journalPath))?.kind == .directory {
                do {
                    _ = try fileSystem.contentsOfDirectory(journalPath)
                } catch {
                    throw PersistenceError(.readFailed, "Cannot list the journal directory.", fileURL: URL(fileURLWithPath: journalPath), underlyingError: error)
                }
            }
        }
    }

    /// The journal to read, and whether files of the earlier layout are read too: the store's
    /// own journal, or for a read-only store the journal read afresh — so that it sees the
    /// changes of the process holding the store — with the files of a store not (completely)
    /// migrated; `nil` for ``Engine/files``.
    func readableJournal() throws -> (journal: JournalStore, filesToo: Bool)? {
        if let journal { return (journal, false) }
        guard access == .readOnly, configuration.engine == .journal else { return nil }
        if let snapshot = state.withLock({ $0.readSnapshot }) { return (snapshot.journal, snapshot.filesToo) }
        let journal = try JournalStore(directory: directory, configuration: configuration.journalConfiguration(readOnly: true))
        return (journal, hasFilesOfEarlierLayout())
    }

    /// The counts of a store whose records all live in its journal, from the journal's index
    /// (no record read), with the entries that cannot be read (damaged frames a read-only
    /// open skipped, files of a newer format left in place); `nil` for a store whose
    /// records are files of the earlier layout, or partly (not migrated yet).
    package func indexCounts() throws -> IndexSummary? {
        guard let (journal, filesToo) = try readableJournal(), !filesToo else { return nil }
        let filesLeft = state.withLock { $0.filesLeft }
        let skipped = access == .readOnly ? journal.openReport.skipped : []
        return (journal.indexCounts(), skipped + filesLeft, { journal.isPending(id: $0) })
    }

    /// What ``indexCounts()`` returns: the counts, the entries that cannot be read, and
    /// whether a record is pending, by its identifier.
    package typealias IndexSummary = (counts: JournalStore.IndexCounts, unreadable: [LoadReport.Entry], isPending: (String) -> Bool)

    /// Whether a record is pending, by its identifier, from the journal's index, without
    /// counting anything; `nil` for a store whose records are not all in its journal.
    package func indexedPendingLookup() throws -> ((String) -> Bool)? {
        guard let (journal, filesToo) = try readableJournal(), !filesToo else { return nil }
        return { journal.isPending(id: $0) }
    }

    /// Runs `body` with every read of a read-only store served by one opening of its
    /// journal, where each read would otherwise open it afresh (a sequential read of every
    /// segment): reads that belong together (the areas and markers counted by
    /// `ReadOnlyPersistentStore.counts()`) read the store once, and see one state of it.
    /// Calls that overlap share the opening of the first. A store that can write reads its
    /// own journal: `body` just runs.
    ///
    /// ```swift
    /// let store = try RecordStore(directory: URL(fileURLWithPath: "/var/app/store"), access: .readOnly)
    /// let (pending, failed) = try store.withReadSnapshot { (try store.loadPending(), try store.loadFailed()) }
    /// ```
    package func withReadSnapshot<T>(_ body: () throws -> T) throws -> T {
        guard journal == nil, access == .readOnly, configuration.engine == .journal else { return try body() }
        let joined = state.withLock { state -> Bool in
            guard state.readSnapshot != nil else { return false }
            state.readSnapshot?.users += 1
            return true
        }
        if !joined {
            // Opened outside the lock (it reads every segment); a call that installed one
            // meanwhile wins, and this opening is dropped.
            let opened = try JournalStore(directory: directory, configuration: configuration.journalConfiguration(readOnly: true))
            let filesToo = hasFilesOfEarlierLayout()
            state.withLock { state in
                if state.readSnapshot == nil {
                    state.readSnapshot = (opened, filesToo, 1)
                } else {
                    state.readSnapshot?.users += 1
                }
            }
        }
        defer {
            state.withLock { state in
                state.readSnapshot?.users -= 1
                if state.readSnapshot?.users == 0 { state.readSnapshot = nil }
            }
        }
        return try body()
    }

    deinit {
        lock?.release()
    }

    /// Lets the directory lock go while the app is not active (see `StoreLock.suspend()`);
    /// the store goes on changing, as its owner's.
    package func suspendLock() {
        lock?.suspend()
    }

    /// Takes the directory lock again after ``suspendLock()``.
    ///
    /// - Throws: ``PersistenceError/Code/locked`` when another process took it meanwhile:
    ///   from then on every change throws that error, since the other process may have
    ///   changed the store under this one.
    package func resumeLock() throws {
        do {
            try lock?.resume()
        } catch let error as PersistenceError {
            state.withLock { $0.lostLock = error }
            journal?.refuseChanges(error)
            throw error
        }
    }

    /// Waits for the changes under way to finish, then releases the directory lock; later
    /// changes throw ``PersistenceError/Code/storeNotWritable``.
    ///
    /// Waiting matters when another process takes the store over as soon as the lock is
    /// released: a write of this store landing after that would change a store it no longer
    /// owns.
    package func close() {
        state.withLock { $0.isClosed = true }
        changes.closeAndWait()
        journal?.close()
        lock?.release()
    }

    /// A new enqueue sequence number, greater than every one handed out or stored before.
    ///
    /// The first call reads the records on disk to find the largest, except in the areas a
    /// load has read already (after ``loadPending()``, only the failed area is read).
    package func nextEnqueueSequence() -> UInt64 {
        if let journal { return journal.nextEnqueueSequence() }
        return state.withLock { state in
            let unread = [StoreLayout.Area.pending, .failed].filter { !state.areasWithKnownEnqueueSequences.contains($0) }
            if !unread.isEmpty {
                state.lastEnqueueSequence = max(state.lastEnqueueSequence, largestStoredEnqueueSequence(in: unread))
                state.areasWithKnownEnqueueSequences.formUnion(unread)
            }
            state.lastEnqueueSequence += 1
            return state.lastEnqueueSequence
        }
    }

    /// Stores a new pending record durably.
    ///
    /// - Throws: ``PersistenceError`` with ``PersistenceError/Code/recordTooLarge`` or
    ///   ``PersistenceError/Code/payloadDoesNotRoundTrip`` when the record cannot be encoded,
    ///   ``PersistenceError/Code/writeFailed`` or ``PersistenceError/Code/directoryUnavailable``
    ///   when the file system fails. After a failure nothing is stored.
    package func add(_ record: OperationRecord) throws {
        let change = try beginChange()
        defer { change.end() }
        if let journal { return try journal.add(record) }
        let bytes = try RecordFormat.encode(record, maximumSize: configuration.maximumRecordSize)
        let path = layout.path(ofRecord: record.id, in: .pending)
        if (try? configuration.fileSystem.linkStatus(path)) != nil {
            throw PersistenceError(.writeFailed, "A pending record with this identifier already exists.", fileURL: url(path))
        }
        try writeDurably(bytes, to: path, area: .pending)
        noteEnqueueSequence(record.enqueueSequence)
        do {
            try synchronize(.pending, changing: path)
        } catch {
            // Not durable: take the record back so a failed add never runs after a crash.
            try? configuration.fileSystem.unlink(path)
            throw error
        }
    }

    /// Replaces a pending record durably, such as after a retry.
    ///
    /// - Throws: ``PersistenceError/Code/recordNotFound`` when no pending record has this
    ///   identifier, and the errors of ``add(_:)``. When writing fails the previous version
    ///   stays in place; only when the final directory sync fails may the new version remain.
    package func update(_ record: OperationRecord) throws {
        let change = try beginChange()
        defer { change.end() }
        if let journal { return try journal.update(record) }
        try checkHasPayload(record)
        let bytes = try RecordFormat.encode(record, maximumSize: configuration.maximumRecordSize)
        let path = try existingRecordPath(record.id, in: .pending)
        try writeDurably(bytes, to: path, area: .pending)
        try synchronize(.pending, changing: path)
    }

    /// Removes a pending record, after its operation succeeded or was cancelled.
    ///
    /// The removal survives a process crash as soon as this returns, but the directory is not
    /// synced for it: it reaches the disk with the next sync of the pending directory (every
    /// add and update makes one) or the file system's own periodic commit. A power cut before
    /// then may bring the record back, and its operation runs again — the at-least-once
    /// guarantee allows that, and not waiting for a directory sync here roughly halves the
    /// disk syncs of an operation's lifecycle (add, run, remove).
    ///
    /// With `synchronizes`, the directory is synced before this returns, so the removal
    /// survives a power cut too (a dependent cancelled with its prerequisite is removed so, before
    /// the prerequisite's own record: a dependent must never outlive it on disk).
    ///
    /// - Throws: ``PersistenceError/Code/recordNotFound``, ``PersistenceError/Code/writeFailed``.
    package func removePending(id: String, synchronizes: Bool = false) throws {
        let change = try beginChange()
        defer { change.end() }
        if let journal { return try journal.removePending(id: id, synchronizes: synchronizes) }
        try remove(id, from: .pending, synchronizes: synchronizes)
    }

    /// The records stored with idempotency key `key` (pending or failed), and the removed ones
    /// whose key the journal still remembers, by enqueue sequence.
    ///
    /// - Throws: ``PersistenceError/Code/invalidOptions`` for a store of the earlier layout
    ///   (``Engine/files``), which remembers no key.
    package func records(withIdempotencyKey key: String) throws -> [String] {
        guard let journal else {
            throw PersistenceError(.invalidOptions, "Idempotency keys need the journal store; this store keeps one file per record.", fileURL: directory)
        }
        return journal.records(withIdempotencyKey: key)
    }

    /// Moves a pending record to the failed area with `reason`, and returns it as stored there.
    ///
    /// The record is first rewritten in place with its ``OperationRecord/failureReason`` and
    /// then renamed, so a crash in between leaves a pending record that the next
    /// ``loadPending()`` moves on. It leaves its batch: a failed record never depends on a
    /// batch's commit marker (see ``addBatch(_:)``).
    package func moveToFailed(_ record: OperationRecord, reason: String) throws -> OperationRecord {
        let change = try beginChange()
        defer { change.end() }
        if let journal { return try journal.moveToFailed(record, reason: reason) }
        try checkHasPayload(record)
        var failed = record
        failed.failureReason = reason
        failed.nextAttemptAt = nil
        failed.batchID = nil
        let bytes = try RecordFormat.encode(failed, maximumSize: configuration.maximumRecordSize)
        let path = try existingRecordPath(record.id, in: .pending)
        try writeDurably(bytes, to: path, area: .pending)
        try move(record.id, from: .pending, to: .failed)
        return failed
    }

    // MARK: Shared machinery

    /// Starts one change of the store, which ``close()`` waits for until it is ended:
    /// `let change = try beginChange(); defer { change.end() }`.
    ///
    /// - Throws: ``PersistenceError/Code/storeNotWritable`` when the store is read-only or
    ///   closed.
    func beginChange() throws -> ChangeGate.Change {
        try checkWritable()
        guard let change = changes.begin() else {
            throw PersistenceError(.storeNotWritable, "The store has been closed.", fileURL: directory)
        }
        return change
    }

    func checkWritable() throws {
        guard access == .readWrite else {
            throw PersistenceError(.storeNotWritable, "The store was opened read-only.", fileURL: directory)
        }
        let (isClosed, lostLock) = state.withLock { ($0.isClosed, $0.lostLock) }
        if let lostLock { throw lostLock }
        guard !isClosed else {
            throw PersistenceError(.storeNotWritable, "The store has been closed.", fileURL: directory)
        }
    }

    /// Refuses to overwrite a record with one whose payload was never loaded (a stored
    /// payload is never empty), so that a mistake can never erase an operation's data.
    func checkHasPayload(_ record: OperationRecord) throws {
        guard !record.payload.isEmpty else {
            throw PersistenceError(.writeFailed, "Refused to write record \(record.id) without its payload; the stored record is unchanged.")
        }
    }

    func url(_ path: String) -> URL {
        URL(fileURLWithPath: path)
    }

    func existingRecordPath(_ id: String, in area: StoreLayout.Area) throws -> String {
        guard OperationRecord.isValidIdentifier(id) else {
            throw PersistenceError(.recordNotFound, "\"\(id)\" is not a record identifier.")
        }
        let path = layout.path(ofRecord: id, in: area)
        guard (try? configuration.fileSystem.linkStatus(path))?.kind == .regular else {
            try checkAreaExists(area)
            throw PersistenceError(.recordNotFound, "There is no \(area.rawValue) record with identifier \(id).", fileURL: url(path))
        }
        return path
    }

    func noteEnqueueSequence(_ sequence: UInt64) {
        state.withLock { $0.lastEnqueueSequence = max($0.lastEnqueueSequence, sequence) }
    }

    /// Writes a file durably (except for the directory sync), mapping failures to ``PersistenceError``.
    func writeDurably(_ bytes: Data, to path: String, area: StoreLayout.Area) throws {
        do {
            try file.replaceContents(of: path, with: bytes)
        } catch {
            try checkAreaExists(area)
            throw writeFailed("Could not write the record file; the previous contents, if any, are unchanged.", path: path, error: error)
        }
    }

    /// Syncs an area directory after a change to `path`, sharing the sync with concurrent callers.
    func synchronize(_ area: StoreLayout.Area, changing path: String) throws {
        do {
            try synchronizers[area]!.synchronize()
        } catch {
            try checkAreaExists(area)
            throw writeFailed("Could not make the change to the \(area.rawValue) directory durable.", path: path, error: error)
        }
    }

    /// Unlinks a record and, unless `synchronizes` is `false`, syncs its area.
    func remove(_ id: String, from area: StoreLayout.Area, synchronizes: Bool = true) throws {
        let path = try existingRecordPath(id, in: area)
        do {
            try configuration.fileSystem.unlink(path)
        } catch {
            try checkAreaExists(area)
            throw writeFailed("Could not remove the record file.", path: path, error: error)
        }
        if synchronizes {
            try synchronize(area, changing: path)
        }
    }

    /// Renames a record file to another area, keeping its name, and syncs both areas.
    func move(_ id: String, from source: StoreLayout.Area, to destination: StoreLayout.Area) throws {
        try moveEntry(StoreLayout.fileName(ofRecord: id), from: source, to: destination, as: StoreLayout.fileName(ofRecord: id))
    }

    /// Moves any entry to `newName` in another area: its name in `source` made durable, a
    /// second name in `destination` made durable, then the first name removed and that
    /// removal made durable.
    ///
    /// Not a plain `rename(2)`: a rename between two directories changes both, and a file
    /// system that does not keep it whole across a power cut (journaling ones do) may keep the
    /// removal from `source` without the arrival in `destination`, losing the entry. Linked
    /// first, the entry is in `destination` durably before it leaves `source`; a cut in between
    /// leaves it in both, and the next load finishes the move (the entry in `source` says where
    /// it belongs). Where the file system has no hard links, or `destination` already has the
    /// name (that left-over copy), the move is a rename, safe then: a copy is already in place.
    func moveEntry(_ name: String, from source: StoreLayout.Area, to destination: StoreLayout.Area, as newName: String) throws {
        let sourcePath = layout.path(ofEntry: name, in: source)
        let destinationPath = layout.path(ofEntry: newName, in: destination)
        let fileSystem = configuration.fileSystem
        // The entry's name in `source` may be a rewrite renamed into place just before (as
        // `moveToFailed` does), not yet durable: it must be before the entry gets its second
        // name, or a cut could keep the new name in `destination` and the old file in `source`.
        try synchronize(source, changing: sourcePath)
        var linked = true
        do {
            try fileSystem.link(sourcePath, destinationPath)
        } catch let error as SystemCallError where [EEXIST, EPERM, ENOTSUP, EOPNOTSUPP, EXDEV, EMLINK].contains(error.code) {
            linked = false
        } catch {
            try checkAreaExists(source)
            try checkAreaExists(destination)
            throw writeFailed("Could not move the entry to the \(destination.rawValue) area; it is unchanged.", path: sourcePath, error: error)
        }
        if !linked {
            do {
                try fileSystem.rename(sourcePath, destinationPath)
            } catch {
                try checkAreaExists(source)
                try checkAreaExists(destination)
                throw writeFailed("Could not move the entry to the \(destination.rawValue) area; it is unchanged.", path: sourcePath, error: error)
            }
            // A rename onto another name of the same file (the copy an interrupted move left)
            // does nothing and succeeds (POSIX): the source name must then go by itself.
            linked = (try? fileSystem.linkStatus(sourcePath)) != nil
        }
        try synchronize(destination, changing: destinationPath)
        if linked {
            do {
                try fileSystem.unlink(sourcePath)
            } catch {
                try checkAreaExists(source)
                throw writeFailed("The entry was copied to the \(destination.rawValue) area but could not leave the \(source.rawValue) area; the next open finishes the move.", path: sourcePath, error: error)
            }
        }
        try synchronize(source, changing: sourcePath)
    }

    /// Throws ``PersistenceError/Code/directoryUnavailable`` when an area directory is gone.
    func checkAreaExists(_ area: StoreLayout.Area) throws {
        let path = layout.path(of: area)
        guard (try? configuration.fileSystem.linkStatus(path))?.kind == .directory else {
            throw PersistenceError(
                .directoryUnavailable,
                "The store's \(area.rawValue) directory is missing or not a directory; it was moved or deleted while the store was open. Restore it, or close and reopen the store to create it again.",
                fileURL: url(path)
            )
        }
    }

    func writeFailed(_ message: String, path: String, error: any Error) -> PersistenceError {
        PersistenceError(.writeFailed, "\(message) \(error).", fileURL: url(path), underlyingError: error)
    }

    /// Removes temporary files left by writes that a crash interrupted; called at open only,
    /// when no write of this store can be in progress.
    private func removeTemporaryFiles() {
        for area in StoreLayout.Area.allCases where area != .quarantine {
            let names = (try? configuration.fileSystem.contentsOfDirectory(layout.path(of: area))) ?? []
            for name in names where StoreLayout.isTemporaryFileName(name) {
                try? configuration.fileSystem.unlink(layout.path(ofEntry: name, in: area))
            }
        }
    }
}

/// The changes of a store under way, and whether it still accepts new ones.
final class ChangeGate: @unchecked Sendable {
    // @unchecked: `count` and `isClosed` are only touched while `condition` is locked.
    private let condition = NSCondition()
    private var count = 0
    private var isClosed = false

    /// A change under way; ``end()`` it exactly once.
    struct Change {
        fileprivate let gate: ChangeGate
        func end() { gate.end() }
    }

    /// Counts a change in, unless the store is closed.
    func begin() -> Change? {
        condition.lock()
        defer { condition.unlock() }
        guard !isClosed else { return nil }
        count += 1
        return Change(gate: self)
    }

    fileprivate func end() {
        condition.lock()
        count -= 1
        if count == 0 { condition.broadcast() }
        condition.unlock()
    }

    /// Refuses new changes and waits until those under way have ended.
    func closeAndWait() {
        condition.lock()
        isClosed = true
        while count > 0 { condition.wait() }
        condition.unlock()
    }
}
