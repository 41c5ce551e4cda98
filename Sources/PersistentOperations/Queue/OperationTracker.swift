import Foundation

// The driver that connects one stored `RetryingOperation` to its queue.

/// Connects one stored `RetryingOperation` to its queue.
final class OperationTracker: RetryingOperationDriver {
    let recordID: String
    private weak let queue: PersistentOperationQueue?

    init(recordID: String, queue: PersistentOperationQueue) {
        self.recordID = recordID
        self.queue = queue
    }

    func operationWillStartAttempt(_ operation: RetryingOperation, _ attempt: RetryingOperation.AttemptInfo) {
        queue?.attemptWillStart(recordID, attempt: attempt.attempt)
    }

    func operationWillWait(_ operation: RetryingOperation, _ wait: RetryingOperation.WaitInfo) {
        queue?.operationWillWait(recordID, wait, progress: operation.reportedProgressUnits)
    }

    func operationRequestsAttempt(_ operation: RetryingOperation, admit: @escaping @Sendable () -> Void) {
        guard let queue else { return admit() }
        queue.admissionRequested(recordID, admit: admit)
    }

    func operationDidFinish(_ operation: RetryingOperation, _ outcome: RetryingOperation.Outcome) {
        queue?.operationFinished(recordID, outcome: outcome)
    }

    func operationWasCancelled(_ operation: RetryingOperation) {
        queue?.operationWasCancelled(recordID, operation)
    }

    func operationReportedProgress(_ operation: RetryingOperation, completed: Int64, of total: Int64) {
        queue?.operationReportedProgress(recordID, completed: completed, of: total)
    }
}
