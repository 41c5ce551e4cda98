import Foundation

extension RetryingOperation: ProgressReporting {
    /// The progress of the operation's work, for a progress bar or a system's progress UI.
    ///
    /// The operation sets its units as its attempts go; a view observes it (KVO on Apple
    /// platforms; read it again on a timer on Linux, whose `Progress` posts no KVO).
    ///
    /// ```swift
    /// final class UploadPhoto: RetryingOperation, @unchecked Sendable {
    ///     override var isAsynchronous: Bool { true }
    ///     override func startBaseOperation(isRetry: Bool) {
    ///         progress.totalUnitCount = fileSize
    ///         // A retry resumes at the bytes the last attempt got there.
    ///         uploader.upload(file, from: progress.completedUnitCount, sent: { bytes in
    ///             self.progress.completedUnitCount = bytes
    ///         }, completion: { result in
    ///             switch result {
    ///             case .success: self.baseOperationEnded()
    ///             case .failure(let error): self.baseOperationEnded(withRetriableError: error)
    ///             }
    ///         })
    ///     }
    /// }
    /// ```
    ///
    /// - **A retry continues** from where the last attempt left the progress: it counts the
    ///   work done, not the attempt's (an upload that resumes at its byte offset reads it
    ///   there). An attempt that starts over sets `completedUnitCount` back to 0 itself. In a
    ///   `PersistentOperationQueue` this holds across launches: the units are saved with the
    ///   operation's record when an attempt ends in a retry, and the operation rebuilt after a
    ///   relaunch starts its progress there.
    /// - **Success completes it:** when the operation succeeds, `completedUnitCount` becomes
    ///   `totalUnitCount` (an indeterminate progress becomes 1 of 1). A failure leaves it
    ///   where the last attempt left it.
    /// - **Cancelling either cancels both:** ``cancel()`` cancels the progress, and cancelling
    ///   the progress (a cancel button on the progress UI) cancels the operation (on Linux,
    ///   `Progress` runs its cancellation handler on another thread, a moment later).
    /// - It is made the first time it is asked for, indeterminate (`totalUnitCount` -1) or
    ///   with the units ``reportProgress(completed:of:)`` reported, and is never the child of
    ///   another progress; add it to one yourself
    ///   (`parent.addChild(operation.progress, withPendingUnitCount: 1)`). An operation whose
    ///   progress nobody asks for pays nothing for it: report through
    ///   ``reportProgress(completed:of:)`` where nobody may be looking (making the `Progress`
    ///   costs about a quarter of a microsecond an operation).
    ///
    /// In an ``AsyncRetryingOperation`` body the same progress is
    /// ``AsyncRetryingOperation/Attempt/progress``.
    public var progress: Progress {
        // A cancel or a success that came first is read in the hold of the lock that publishes
        // the progress: one that comes after finds the progress there and sees to it itself.
        let (progress, isNew, isCancelled, hasSucceeded) = machine.withLock { state -> (Progress, Bool, Bool, Bool) in
            if let progress = state.progress { return (progress, false, false, false) }
            let progress = Progress.discreteProgress(totalUnitCount: state.reportedUnits.total)
            progress.completedUnitCount = state.reportedUnits.completed
            state.progress = progress
            let hasSucceeded = if case .finished(.succeeded) = state.phase { true } else { false }
            return (progress, true, state.isCancelled, hasSucceeded)
        }
        guard isNew else { return progress }
        progress.cancellationHandler = { [weak self] in
            guard let self, !self.isCancelled else { return }
            self.cancel()
        }
        if isCancelled, !progress.isCancelled { progress.cancel() }
        if hasSucceeded { Self.complete(progress) }
        return progress
    }

    /// Reports how much of the operation's work is done: `completed` units of `total` (a
    /// negative total: not known yet), as setting ``progress``'s `completedUnitCount` and
    /// `totalUnitCount` does — the cheap way when nobody may be looking: the numbers are kept,
    /// and ``progress`` is made from them only when someone asks for it.
    ///
    /// ```swift
    /// override func startBaseOperation(isRetry: Bool) {
    ///     uploader.upload(file, from: 0, sent: { bytes in
    ///         self.reportProgress(completed: bytes, of: fileSize)
    ///     }, completion: { result in
    ///         switch result {
    ///         case .success: self.baseOperationEnded()
    ///         case .failure(let error): self.baseOperationEnded(withRetriableError: error)
    ///         }
    ///     })
    /// }
    /// ```
    ///
    /// A `PersistentOperationQueue`'s progress of a tag, a lane or the whole queue counts the
    /// fractions reported this way (a `completedUnitCount` set on ``progress`` directly is
    /// seen when the operation ends).
    public final func reportProgress(completed: Int64, of total: Int64) {
        let (progress, driver) = machine.withLock { state -> (Progress?, (any RetryingOperationDriver)?) in
            if state.progress == nil { state.reportedUnits = (completed, total) }
            return (state.progress, state.driver)
        }
        if let progress {
            progress.totalUnitCount = total
            progress.completedUnitCount = completed
        }
        driver?.operationReportedProgress(self, completed: completed, of: total)
    }

    /// Completes `progress`: all of its units, or 1 of 1 when it has no total.
    static func complete(_ progress: Progress) {
        if progress.totalUnitCount < 0 {
            progress.totalUnitCount = 1
        }
        progress.completedUnitCount = progress.totalUnitCount
    }
}
