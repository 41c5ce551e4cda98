import Foundation

// The progress of a group of operations (the whole queue, a tag, a lane), kept only for the
// groups someone asked for (`progress(for:)`): nothing is counted until then.
//
// A group counts the operations that were pending in it when it was made and every one that
// joins it after (added, restored, re-queued), each worth ``ProgressGroups/unitsPerOperation``
// units: an operation that ends (succeeds, fails for good, is cancelled) completes its units,
// and one still pending completes the fraction its attempts reported
// (`RetryingOperation.reportProgress(completed:of:)`). The counts live in the queue's state
// (its lock); the `Progress` objects are changed, and the events emitted, on `progressQueue`,
// never under the lock, at most once an interval (`Configuration.progressInterval`) however
// often operations report: a change marks its groups, and the first mark schedules the update.

extension PersistentOperationQueue {
    /// The operations a queue's progress counts: all of them, those with a tag, or those of a
    /// lane.
    ///
    /// ```swift
    /// queue.eventHandler = { event in
    ///     if case .progress(.tag("photos"), let fraction, _) = event {
    ///         print("photos: \(Int(fraction * 100)) %")
    ///     }
    /// }
    /// ```
    public enum ProgressScope: Sendable, Hashable {
        /// Every operation of the queue.
        case all
        /// The operations added with this tag (``EnqueueOptions/tags``).
        case tag(String)
        /// The operations of this ordered lane (``EnqueueOptions/lane``).
        case lane(String)

        /// Whether an operation stored as `record` belongs to the scope.
        func contains(_ record: OperationRecord) -> Bool {
            contains(tags: record.tags, lane: record.lane)
        }

        /// Whether an operation stored with `tags` in `lane` belongs to the scope.
        func contains(tags: [String], lane: String?) -> Bool {
            switch self {
            case .all: return true
            case .tag(let tag): return tags.contains(tag)
            case .lane(let scopeLane): return lane == scopeLane
            }
        }
    }

    /// What the queue counts for the groups whose progress was asked for.
    struct ProgressGroups: Sendable {
        /// The units of one operation in a group's `Progress`.
        static let unitsPerOperation: Int64 = 1_000

        struct Group: Sendable {
            let progress: Progress
            /// Operations of the group in the queue's table now.
            var pending = 0
            /// Operations of the group that ended since the group was made.
            var ended = 0
            /// The fractions reported by pending operations of the group, by identifier.
            var fractions: [String: Double] = [:]
            /// Whether its `Progress` is behind the counts.
            var isStale = false

            var completedUnits: Int64 {
                let reported = fractions.values.reduce(0, +)
                return Int64(ended) * ProgressGroups.unitsPerOperation + Int64((reported * Double(ProgressGroups.unitsPerOperation)).rounded(.down))
            }

            var totalUnits: Int64 { Int64(pending + ended) * ProgressGroups.unitsPerOperation }
        }

        var groups: [ProgressScope: Group] = [:]
        /// Whether an update of the `Progress` objects is scheduled on `progressQueue`.
        var isUpdateScheduled = false

        var isEmpty: Bool { groups.isEmpty }

        /// An operation stored as `record` joined the queue's table.
        mutating func joined(_ record: OperationRecord) {
            for scope in groups.keys where scope.contains(record) {
                groups[scope]!.pending += 1
                groups[scope]!.isStale = true
            }
        }

        /// A plain restored record (no tags, no lane) joined the queue's table.
        mutating func joinedPlain() {
            guard groups[.all] != nil else { return }
            groups[.all]!.pending += 1
            groups[.all]!.isStale = true
        }

        /// The operation stored as `record` left the queue's table; `ended`: because it ended
        /// (else it only stopped being run by this queue, as a record held for a prerequisite
        /// that cannot run in this launch). Whether a group it was in has none pending left.
        mutating func left(_ record: OperationRecord, ended: Bool) -> Bool {
            var emptied = false
            for scope in groups.keys where scope.contains(record) {
                groups[scope]!.pending -= 1
                if ended { groups[scope]!.ended += 1 }
                groups[scope]!.fractions[record.id] = nil
                groups[scope]!.isStale = true
                if groups[scope]!.pending == 0 { emptied = true }
            }
            return emptied
        }

        /// The pending operation stored as `record` reported `completed` units of `total`.
        /// Whether a group counts it.
        mutating func reported(_ record: OperationRecord, completed: Int64, of total: Int64) -> Bool {
            let fraction = total > 0 ? min(1, max(0, Double(completed) / Double(total))) : 0
            var counted = false
            for scope in groups.keys where scope.contains(record) {
                groups[scope]!.fractions[record.id] = fraction
                groups[scope]!.isStale = true
                counted = true
            }
            return counted
        }

        /// The groups whose `Progress` is behind, with their numbers, marked up to date.
        mutating func takeStale() -> [(scope: ProgressScope, progress: Progress, completed: Int64, total: Int64, operations: Int)] {
            var stale: [(ProgressScope, Progress, Int64, Int64, Int)] = []
            for (scope, group) in groups where group.isStale {
                stale.append((scope, group.progress, group.completedUnits, group.totalUnits, group.pending + group.ended))
                groups[scope]!.isStale = false
            }
            return stale
        }
    }

    /// Under the lock: schedules an update of the groups' `Progress` objects, unless one is
    /// scheduled or no group is stale. (`asyncAfter` only queues a block: nothing runs under the
    /// lock.)
    func scheduleProgressUpdate(in state: inout State) {
        guard !state.progressGroups.isEmpty, !state.progressGroups.isUpdateScheduled,
              state.progressGroups.groups.values.contains(where: \.isStale)
        else { return }
        state.progressGroups.isUpdateScheduled = true
        progressQueue.asyncAfter(deadline: .now() + configuration.progressInterval) { [weak self] in
            self?.updateProgress()
        }
    }

    /// Brings the stale groups' `Progress` objects up to date and emits their events (on
    /// `progressQueue`).
    func updateProgress() {
        state.withLock { $0.progressGroups.isUpdateScheduled = false }
        updateProgressIfStale()
    }

    /// Sets the stale groups' `Progress` objects and emits their events (on `progressQueue`).
    private func updateProgressIfStale() {
        let stale = state.withLock { state in state.progressGroups.takeStale() }
        for group in stale {
            group.progress.totalUnitCount = group.total
            group.progress.completedUnitCount = group.completed
            let fraction = group.total > 0 ? Double(group.completed) / Double(group.total) : 1
            hub.emit(.progress(group.scope, fractionCompleted: fraction, operations: group.operations))
        }
    }

    /// Under the lock: the entry of `record` left the queue's table (see
    /// ``ProgressGroups/left(_:ended:)``). Whether a group has none pending left: the caller
    /// brings the progress up to date at once (`updateProgressNow()`), so that a progress is
    /// whole by the time `allOperationsFinished()` returns.
    @discardableResult
    func left(_ record: OperationRecord, ended: Bool, in state: inout State) -> Bool {
        guard !state.progressGroups.isEmpty else { return false }
        let emptied = state.progressGroups.left(record, ended: ended)
        scheduleProgressUpdate(in: &state)
        return emptied
    }

    /// Brings the stale groups' `Progress` objects up to date now, in order with the
    /// throttled updates (never under the queue's lock).
    func updateProgressNow() {
        progressQueue.sync { updateProgressIfStale() }
    }

    /// An operation of the queue reported its progress (`reportProgress(completed:of:)`).
    func operationReportedProgress(_ id: String, completed: Int64, of total: Int64) {
        state.withLock { state in
            guard !state.progressGroups.isEmpty, let record = state.entries[id]?.record else { return }
            if state.progressGroups.reported(record, completed: completed, of: total) {
                scheduleProgressUpdate(in: &state)
            }
        }
    }
}
