import Foundation

/// What ``PersistentOperationQueue/restore()`` found in the store.
///
/// ```swift
/// let report = try queue.restore()
/// for entry in report.quarantined {
///     logger.warning("quarantined \(entry.name): \(entry.reason)")
/// }
/// if !report.unknownTypes.isEmpty {
///     logger.warning("\(report.unknownTypes.count) records of unregistered types were kept")
/// }
/// ```
public struct RestoreReport: Sendable, Hashable {
    /// A stored entry that was not restored.
    public struct Entry: Sendable, Hashable {
        /// The entry's file name in the store.
        public var name: String
        /// Why it was not restored, for people.
        public var reason: String
    }

    /// The operations rebuilt and scheduled, in the order they were queued (priority, then
    /// enqueue order).
    public var restored: [PersistentOperationID] = []
    /// Operations whose attempt was in flight during as many consecutive crashes as the
    /// configured limit; they were moved to the failed area instead of run again.
    public var movedToFailedAfterCrashes: [PersistentOperationID] = []
    /// Entries that were corrupt, truncated, oversized, not regular files, or whose payload
    /// did not decode; they were moved to the quarantine area.
    public var quarantined: [Entry] = []
    /// Records of types that were never registered with ``PersistentOperationQueue/register(_:)``:
    /// kept on disk untouched, never run or deleted.
    public var unknownTypes: [UnknownTypeRecord] = []
    /// Records written by a newer version of the library; left in place.
    public var newerFormatVersions: [Entry] = []
    /// Pending records that replaced an older record with the same unique key (a crash had
    /// interrupted the replacement); the older record was removed.
    public var removedAsReplaced: [PersistentOperationID] = []
    /// Records of an ``PersistentOperationQueue/addOperations(_:)`` batch that a crash
    /// interrupted before the batch was committed (the call never returned): removed, so that
    /// a batch is restored whole or not at all.
    public var discardedFromUncommittedBatches: [PersistentOperationID] = []
    /// Operations whose prerequisite is in the failed area (or was quarantined): moved to the
    /// failed area too, with the prerequisite named (see ``PersistentOperationEvent/abandoned(_:prerequisite:)``).
    public var failedWithTheirPrerequisites: [PersistentOperationID] = []
    /// Operations waiting for a prerequisite that cannot run in this launch (its type is not
    /// registered, or a newer library wrote it): kept on disk untouched, like it.
    public var heldForUnavailablePrerequisites: [PersistentOperationID] = []

    public init() {}
}

/// A stored record whose type was never registered with ``PersistentOperationQueue/register(_:)``.
public struct UnknownTypeRecord: Sendable, Hashable {
    /// The record's identifier.
    public var id: PersistentOperationID
    /// The ``PersistentOperation/persistenceIdentifier`` the record names.
    public var typeIdentifier: String
}
