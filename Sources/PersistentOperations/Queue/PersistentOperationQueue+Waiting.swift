import Foundation
import RetryingOperation

// Waiting without a thread: `allOperationsFinished()` parks a continuation in
// `State.emptyWaiters`; `forget` resumes them all when the last entry leaves. A waiter whose
// task is cancelled removes its own continuation (found by its token) and resumes it at once,
// so a cancelled wait neither hangs nor leaks.

extension PersistentOperationQueue {
    /// A task awaiting an empty queue.
    struct EmptyWaiter: Sendable {
        let token: ObjectIdentifier
        let continuation: CheckedContinuation<Void, Never>

        func resume() {
            continuation.resume()
        }
    }

    /// Returns once the queue tracks no operation, or at once when the task is cancelled.
    func waitUntilEmpty() async {
        let token = WaitToken()
        let id = ObjectIdentifier(token)
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let resumesNow = state.withLock { state -> Bool in
                    // Checked under the lock: a cancellation after this finds the waiter.
                    if state.isIdle || Task.isCancelled { return true }
                    state.emptyWaiters.append(EmptyWaiter(token: id, continuation: continuation))
                    return false
                }
                if resumesNow { continuation.resume() }
            }
        } onCancel: {
            let waiter = state.withLock { state -> EmptyWaiter? in
                guard let index = state.emptyWaiters.firstIndex(where: { $0.token == id }) else { return nil }
                return state.emptyWaiters.remove(at: index)
            }
            waiter?.resume()
        }
        // Keeps the token (and so its identifier) alive until the wait is over.
        withExtendedLifetime(token) {}
    }
}
