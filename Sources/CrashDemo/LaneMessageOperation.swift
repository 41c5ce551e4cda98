import CrashHarness
import Foundation
import PersistentOperations

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

struct MessageRefused: Error, CustomStringConvertible {
    var description: String { "422 message refused" }
}

struct MessageCancelled: Error, CustomStringConvertible {
    var description: String { "the app cancelled the message" }
}

/// A chat message of the lane soak: a persistent, asynchronous retrying operation that does
/// what its ``LaneMessage/Behaviour`` says and journals each attempt's start and end (synced)
/// before it goes on, the end before it calls `baseOperationEnded`. `@unchecked Sendable`:
/// its payload never changes, and `attemptInProgress` is read and written under `lock` only.
final class LaneMessageOperation: RetryingOperation, PersistentOperation, @unchecked Sendable {
    static let persistenceIdentifier = "demo.lane-message"

    /// The delay before each counted retry, and how many retries a message may make.
    static let retryPolicy = RetryPolicy.constant(0.04, retryLimit: .maximum(10))

    /// The queue the app cancels running messages through (``LaneMessage/Behaviour/cancelledWhileRunning``).
    /// Set once by ``LaneAppCommand`` before anything is restored or added; read-only afterwards.
    nonisolated(unsafe) static var queue: PersistentOperationQueue?

    let payload: LaneMessage
    private let lock = NSLock()
    /// Whether an attempt has started and its end is not journaled yet.
    private var attemptInProgress = false

    init(payload: LaneMessage) {
        self.payload = payload
        super.init()
        retryPolicy = Self.retryPolicy
    }

    override var isAsynchronous: Bool { true }

    override func startBaseOperation(isRetry: Bool) {
        let retries = numberOfRetries ?? 0
        lock.withLock { attemptInProgress = true }
        Effects.write(LaneJournalEvent.started(index: payload.index, attempt: numberOfAttempts, isRetry: isRetry, at: Date()).line)
        DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(payload.attemptMilliseconds)) { [self] in
            switch payload.behaviour {
            case .succeeds, .cancelledWhileWaiting:
                end(.done) { baseOperationEnded() }
            case .retriesTwice where retries < 2:
                end(.retry) { baseOperationEnded(withRetriableError: ServerBusy()) }
            case .retriesTwice:
                end(.done) { baseOperationEnded() }
            case .fails:
                end(.fail) { baseOperationEnded(failingWith: MessageRefused()) }
            case .failsOnceThenSucceeds where !isRetry:
                end(.fail) { baseOperationEnded(failingWith: MessageRefused()) }
            case .failsOnceThenSucceeds:
                end(.done) { baseOperationEnded() }
            case .cancelledWhileRunning:
                // The attempt runs on until the cancel reaches `cancelBaseOperation()`.
                requestCancel()
            }
        }
    }

    override func cancelBaseOperation() {
        // Only this behaviour's attempts wait for the cancel; the others end by themselves.
        guard payload.behaviour == .cancelledWhileRunning else { return }
        end(.cancelled) { baseOperationEnded(failingWith: MessageCancelled()) }
    }

    /// Journals how the attempt in progress ended, then reports it with `report`; does nothing
    /// when no attempt is in progress (a cancel that races with the end of the attempt).
    private func end(_ ending: LaneJournalEvent.AttemptEnd, then report: () -> Void) {
        let isInProgress = lock.withLock {
            defer { attemptInProgress = false }
            return attemptInProgress
        }
        guard isInProgress else { return }
        Effects.write(LaneJournalEvent.ended(index: payload.index, ending).line)
        report()
    }

    /// Cancels this message by its identifier, as the app would, journaling the request first.
    private func requestCancel() {
        Effects.write(LaneJournalEvent.cancelRequested(index: payload.index).line)
        guard let queue = Self.queue, let id = queue.identifier(of: self) else {
            FileHandle.standardError.write(Data("lanes-app: message \(payload.index) has no identifier in the queue; cancelling the operation itself\n".utf8))
            cancel()
            return
        }
        queue.cancelOperation(withID: id)
    }
}
