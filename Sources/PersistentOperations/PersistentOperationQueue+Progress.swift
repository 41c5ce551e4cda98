import Foundation

extension PersistentOperationQueue {
    /// The progress of a group of operations — the whole queue, a tag or a lane — for a progress
    /// bar, or a system's progress UI (a `BGContinuedProcessingTask` on iOS 26).
    ///
    /// It counts the operations of the group that are pending when it is first asked for and
    /// every one that joins the group after (added, restored, re-queued from the failed area),
    /// each an equal share — `totalUnitCount` grows as operations join.
    /// An operation that ends (succeeds, fails for good, is cancelled) completes its share; a
    /// pending one completes the fraction its attempts report through
    /// `RetryingOperation.reportProgress(completed:of:)` (or, in an async body,
    /// `attempt.reportProgress(completed:of:)`), so a large upload
    /// moves the bar while it runs. An operation whose attempts report nothing counts 0 until
    /// it ends.
    ///
    /// ```swift
    /// // On Apple platforms, show it: `ProgressView(photos)`, `observedProgress`, KVO.
    /// let photos = queue.progress(for: .tag("photos"))
    /// // On every platform, Linux included, its events say the same:
    /// queue.eventHandler = { event in
    ///     if case .progress(.tag("photos"), let fraction, let operations) = event {
    ///         print("\(operations) photos: \(Int(fraction * 100)) %")
    ///     }
    /// }
    /// print(photos.fractionCompleted)
    /// ```
    ///
    /// - **Asked for, then counted.** The first call for a scope counts its pending operations
    ///   (it reads every entry of the queue: about a second at a million); later calls return
    ///   the same `Progress`. A queue keeps nothing for scopes nobody asked for.
    /// - **Throttled, pushed.** The `Progress` is changed, and a
    ///   ``PersistentOperationEvent/progress(_:fractionCompleted:operations:)`` event emitted,
    ///   at most once every ``Configuration/progressInterval`` (0.25 s by default) however
    ///   often operations report, on a private queue (never while the queue holds a lock); no
    ///   timer runs while nothing changes. The end of a group's last pending operation updates
    ///   it at once: by the time ``allOperationsFinished()`` returns, it is whole. On Linux,
    ///   whose `Progress` posts no KVO and takes no lock, observe the events: reading the
    ///   `Progress` on another thread while the queue sets it is a data race there.
    /// - It is never cancelled or paused by the queue; cancelling it does nothing to the
    ///   operations (cancel them with ``cancelOperations(taggedWith:)``). Its units are
    ///   `1000` an operation.
    public func progress(for scope: ProgressScope) -> Progress {
        state.withLock { state in
            if let group = state.progressGroups.groups[scope] { return group.progress }
            let pending = scope == .all ? state.entries.count : state.entries.count(where: scope.contains(tags:lane:))
            let progress = Progress.discreteProgress(totalUnitCount: Int64(pending) * ProgressGroups.unitsPerOperation)
            state.progressGroups.groups[scope] = ProgressGroups.Group(progress: progress, pending: pending)
            return progress
        }
    }
}
