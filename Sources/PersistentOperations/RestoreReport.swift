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
    /// Operations that crashed the process as many times as the configured
    /// ``PersistentOperationQueue/Configuration/crashLoopLimit``, each time while their attempt
    /// was the only one in flight — or whose attempts got the process killed that many
    /// launches in a row while they ran alone and the app was active (as iOS kills an app that
    /// exhausts memory or hangs); they were moved to the failed area instead of run again.
    /// The failed record's reason says how many crashes or kills were attributed to it.
    public var movedToFailedAfterCrashes: [PersistentOperationID] = []
    /// Records whose expiration date (``EnqueueOptions/expirationDate``) passed before they
    /// could start: moved to the failed area, reason "expired"; their dependents fail with them.
    public var expired: [PersistentOperationID] = []
    /// Restored records that name run conditions no provider is registered for: they wait,
    /// kept on disk and never run, until ``PersistentOperationQueue/register(_:as:)`` registers
    /// one under each name. Register conditions before `restore()` to avoid this.
    public var unknownConditions: [UnknownConditionRecord] = []
    /// Entries that were corrupt, truncated, oversized or not regular files; they were moved
    /// to the quarantine area.
    ///
    /// A restore does not decode payloads: a record whose payload does not decode as its
    /// type's `Payload` is restored, then quarantined when its operation is built, and
    /// reported only by ``PersistentOperationEvent/quarantined(entryName:reason:)``.
    public var quarantined: [Entry] = []
    /// Records of types that were never registered with ``PersistentOperationQueue/register(_:)``:
    /// kept on disk untouched, never run or deleted.
    public var unknownTypes: [UnknownTypeRecord] = []
    /// Records written by a newer version of the library, and records whose payload a newer
    /// build of the app stored (a ``PersistentOperation/payloadVersion`` later than the
    /// registered type's); left in place, untouched.
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
    /// Also those whose prerequisites form a cycle (the queue never stores one; a store written
    /// by hand or damaged may hold one), which could never start: moved there naming none.
    public var failedWithTheirPrerequisites: [PersistentOperationID] = []
    /// Operations waiting for a prerequisite that cannot run in this launch (its type is not
    /// registered, or a newer library wrote it): kept on disk untouched, like it.
    public var heldForUnavailablePrerequisites: [PersistentOperationID] = []

    /// Operations whose next attempt runs alone, in the order they run: first those that were
    /// in flight when the last launch crashed beside other attempts, or that have crashes on
    /// file, before anything else is started; then those that were in flight when a launch was
    /// killed while the app was active, or that have such kills on file, each once nothing else
    /// is due or in flight. A crash during such an attempt — or a kill while the app is active —
    /// is attributed to that operation; see ``PersistentOperationEvent/runningAlone(_:crashes:)``.
    public var runAlone: [PersistentOperationID] = []
    /// How the last launch that used the store ended, as far as its attempts in flight go.
    public var previousLaunchEnding: LaunchEnding = .noAttemptsInFlight
    /// What the app last said of its state before the last launch ended
    /// (``PersistentOperationQueue/applicationState``): a kill while it was
    /// ``PersistentOperationQueue/ApplicationState/inactive`` counts against no operation.
    ///
    /// ```swift
    /// let report = try queue.restore()
    /// if report.previousLaunchEnding == .killed, report.previousLaunchApplicationState == .inactive {
    ///     print("killed in the background: nothing is blamed")
    /// }
    /// ```
    public var previousLaunchApplicationState: PersistentOperationQueue.ApplicationState = .active

    /// How a launch ended, as far as its attempts in flight go.
    public enum LaunchEnding: Sendable, Hashable {
        /// No attempt was in flight when it ended (or it ended before any started).
        case noAttemptsInFlight
        /// It crashed with attempts in flight: the queue's crash-signal handler saw `signal`
        /// (see ``PersistentOperationQueue/Configuration/installsCrashSignalHandlers``).
        case crashed(signal: Int32)
        /// It was killed with attempts in flight (SIGKILL, as the OS ends apps; or it exited):
        /// the crash-signal handler saw no crash. Attributed to the operation running alone if
        /// the app was active (see ``RestoreReport/previousLaunchApplicationState``), otherwise
        /// to nobody.
        case killed
        /// It ended with attempts in flight, and the store has no record of crash-signal
        /// handlers watching it: they were off
        /// (``PersistentOperationQueue/Configuration/installsCrashSignalHandlers``), or that
        /// launch could not note that they were on — its `attempts/launch` file could not be
        /// written (a full disk, say) or was lost. A crash or a kill, which cannot be told
        /// apart: treated as a possible crash.
        case unwitnessed
    }

    public init() {}
}

extension RestoreReport.LaunchEnding {
    init(_ ending: PreviousLaunchEnding) {
        switch ending {
        case .noAttemptsInFlight: self = .noAttemptsInFlight
        case .crashed(let signal): self = .crashed(signal: signal)
        case .killed: self = .killed
        case .unwitnessed: self = .unwitnessed
        }
    }
}

/// A stored record whose type was never registered with ``PersistentOperationQueue/register(_:)``.
public struct UnknownTypeRecord: Sendable, Hashable {
    /// The record's identifier.
    public var id: PersistentOperationID
    /// The ``PersistentOperation/persistenceIdentifier`` the record names.
    public var typeIdentifier: String
}
