import Foundation

/// A stored operation that runs an `Operation` you don't own — a framework's download, an
/// SDK's upload — built afresh from the stored payload for each attempt, and that you tell how
/// each attempt ended: succeeded, failed for good, or retry, counted or not.
///
/// `RetryableOperationWrapper` retries an operation you don't own, but cannot be stored: it
/// holds the operation, not a payload. Subclass this one instead, as a final class that
/// conforms to ``PersistentOperation``: its ``payload`` is what a relaunch rebuilds it from.
/// Override ``makeBaseOperation(isRetry:)`` to build the operation of an attempt (an
/// `Operation` runs only once, so each attempt gets a new one), and ``attemptResult(of:)`` to
/// read how it ended once it finished:
///
/// ```swift
/// struct DownloadRequest: Codable, Sendable {
///     var url: URL
/// }
///
/// final class StoredDownload: PersistentOperationWrapper<DownloadRequest, DownloadOperation>, PersistentOperation, @unchecked Sendable {
///     static let persistenceIdentifier = "com.example.download"
///
///     override func makeBaseOperation(isRetry: Bool) throws -> DownloadOperation {
///         DownloadOperation(url: payload.url)
///     }
///
///     override func attemptResult(of download: DownloadOperation) -> AttemptResult {
///         switch download.statusCode {
///         case 200: .succeeded
///         case 401: .retry(after: 0, countsTowardRetryLimit: false)   // refresh the token first
///         case 404: .failed(DownloadError.notFound)                    // for good
///         default: .retriableError(DownloadError.status(download.statusCode))
///         }
///     }
/// }
/// ```
///
/// Everything a `RetryingOperation` does applies: its `retryPolicy`
/// (backoff, limit, an attempt timeout that cancels a base operation still running), its retry
/// count and next-attempt date saved with the record, cancellation (which reaches the base
/// operation running at the time; the wrapper then ends cancelled, whatever the base operation
/// reports). A base operation that finishes after its attempt was abandoned (at a timeout) does
/// not end the next attempt.
open class PersistentOperationWrapper<Payload: Codable & Sendable, Base: Operation>: RetryingOperation, @unchecked Sendable {
    // @unchecked: `current` is a `Locked`; `payload` is a constant.

    /// The value saved for the operation.
    public let payload: Payload

    private let current = Locked<Base?>(nil)

    /// Creates the wrapper of `payload` (how a restored one is built, too).
    public required init(payload: Payload) {
        self.payload = payload
        super.init()
    }

    /// The base operation of the current (or last) attempt; `nil` before the first.
    public var currentBaseOperation: Base? {
        current.withLock { $0 }
    }

    /// Where base operations run; `nil` (the default) starts each directly on the wrapper's
    /// attempt thread. Do not return the queue the wrapper itself runs on if it may be bounded
    /// to fewer slots than it needs.
    open var baseOperationQueue: OperationQueue? {
        nil
    }

    /// A new operation, not started, for one attempt: the first (`isRetry` `false`, unless
    /// an attempt was cut short by the end of an earlier process) and each retry. Must be
    /// overridden.
    ///
    /// - Throws: any error: the wrapper then fails for good with it.
    open func makeBaseOperation(isRetry: Bool) throws -> Base {
        // (fatalError, not preconditionFailure: its message is kept in release builds.)
        fatalError("\(type(of: self)) must override makeBaseOperation(isRetry:)")
    }

    /// How the attempt whose base operation just finished ended. The default: it succeeded.
    ///
    /// Called once per attempt, after the base operation finished and unless the wrapper was
    /// cancelled meanwhile, on the thread the base operation's completion runs on.
    open func attemptResult(of operation: Base) -> AttemptResult {
        .succeeded
    }

    public final override var isAsynchronous: Bool {
        true
    }

    public final override func startBaseOperation(isRetry: Bool) {
        let attempt = numberOfAttempts
        let operation: Base
        do {
            operation = try makeBaseOperation(isRetry: isRetry)
        } catch {
            baseOperationEnded(attempt: attempt, with: .failed(error))
            return
        }
        current.withLock { $0 = operation }
        let previousCompletion = operation.completionBlock
        operation.completionBlock = { [unowned operation] in
            // Drop the block (and the wrapper it holds) once it has run.
            operation.completionBlock = nil
            previousCompletion?()
            self.baseOperationFinished(operation, attempt: attempt)
        }
        if let queue = baseOperationQueue {
            queue.addOperation(operation)
        } else {
            operation.start()
        }
    }

    public final override func cancelBaseOperation() {
        currentBaseOperation?.cancel()
    }

    /// The base operation of `attempt` finished: ends that attempt (a late one is ignored).
    private func baseOperationFinished(_ operation: Base, attempt: Int) {
        if isCancelled {
            baseOperationEnded(attempt: attempt, with: .failed(CancellationError()))
            return
        }
        baseOperationEnded(attempt: attempt, with: attemptResult(of: operation))
    }
}
