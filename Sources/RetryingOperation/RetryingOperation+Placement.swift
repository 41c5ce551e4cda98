import Foundation

// Where the attempts of a `RetryingOperation` run, and how `OperationQueue.progress` counts it.
//
// The first attempt runs where `start()` is called: on a worker of the queue that runs the
// operation, or on the thread that starts it by hand. Every later attempt of a synchronous
// operation runs where that first one could have:
//
// - started by `OperationQueue.main`: on the main dispatch queue (the main thread);
// - started by a queue with an `underlyingQueue`: on that dispatch queue;
// - started by hand: on the thread that called `start()`, which waits there — running each
//   retry handed to it — until the operation finishes, as `start()` of any synchronous
//   `Operation` returns only once it has finished;
// - otherwise (a queue without an underlying queue): on the thread where the wait ended, a
//   background thread.
//
// An asynchronous operation's retries, and those of an operation a driver runs (the driver
// places every attempt), start where the wait ended.
//
// A due retry reaches its place through `runDueRetryAtHome`, which records the thread it
// arrives on; `beginAdmittedRetry` starts the attempt only on that thread, and hands the retry
// back otherwise (another thread was performing the operation's callouts when it was
// submitted).

/// The thread that started a synchronous operation by hand: it runs the jobs other threads
/// hand it — the operation's retries — until the operation finishes.
final class StarterThread: @unchecked Sendable {
    // @unchecked: `jobs` and `isFinished` are only touched while `condition` is locked.
    private let condition = NSCondition()
    private var jobs: [@Sendable () -> Void] = []
    private var isFinished = false

    /// Hands `job` to the starting thread. Dropped if the operation has finished.
    func post(_ job: @escaping @Sendable () -> Void) {
        condition.lock()
        defer { condition.unlock() }
        guard !isFinished else { return }
        jobs.append(job)
        condition.signal()
    }

    /// The operation finished: ``runJobsUntilFinished()`` returns.
    func finish() {
        condition.lock()
        isFinished = true
        jobs = []
        condition.signal()
        condition.unlock()
    }

    /// Runs the jobs handed over, on the calling thread (the one that called `start()`),
    /// until ``finish()``.
    func runJobsUntilFinished() {
        while true {
            condition.lock()
            while jobs.isEmpty && !isFinished {
                condition.wait()
            }
            if isFinished {
                condition.unlock()
                return
            }
            let batch = jobs
            jobs = []
            condition.unlock()
            for job in batch {
                job()
            }
        }
    }
}

extension RetryingOperation {
    /// Where the operation is being started from: the queue whose worker calls `start()`, or
    /// `nil` when it is started by hand.
    ///
    /// `OperationQueue.current` is that queue; on the main thread, however, it is the main queue
    /// even outside any operation, so there the operation must also be one of the main queue's
    /// (which holds few).
    func queueStartingIt() -> OperationQueue? {
        guard let current = OperationQueue.current else { return nil }
        guard current === OperationQueue.main else { return current }
        return current.operations.contains { $0 === self } ? current : nil
    }

    /// The dispatch queue on which `queue` runs its operations, if it has one of its own.
    static func dispatchQueue(runningOperationsOf queue: OperationQueue) -> DispatchQueue? {
        queue === OperationQueue.main ? DispatchQueue.main : queue.underlyingQueue
    }

    /// Counts the finish of a synchronous operation started by `queue` in `queue.progress`, as
    /// `OperationQueue` counts a plain synchronous operation: one unit, once the queue's progress
    /// has a total. (Like a plain asynchronous operation, an asynchronous one is not counted.)
    ///
    /// Operations finish on any thread, several at once, and swift-corelibs-foundation's
    /// `Progress` (Linux) has no lock: an `addChild` or a `completedUnitCount` change racing
    /// with another loses units or crashes (in `Progress._updateFractionCompleted`). So there
    /// the counts are made one at a time, under `progressCounting` (that `Progress` calls no
    /// user code meanwhile: it has no KVO, and runs its handlers asynchronously). `NSProgress`
    /// on Apple platforms is thread-safe, and may notify observers (user code) synchronously:
    /// no lock is taken there.
    static func countFinish(in queue: OperationQueue) {
        let progress = queue.progress
        #if canImport(Darwin)
        count(in: progress)
        #else
        progressCounting.lock()
        defer { progressCounting.unlock() }
        count(in: progress)
        #endif
    }

    /// One unit counted in `progress`, once it has a total.
    private static func count(in progress: Progress) {
        guard progress.totalUnitCount > 0 else { return }
        // A unit of its own, not `Progress(totalUnitCount:)`: that one becomes a child of the
        // thread's current progress, if any (the finish may happen inside another operation's
        // work, or the caller's), and `addChild` then traps on it.
        let unit = Progress.discreteProgress(totalUnitCount: 1)
        progress.addChild(unit, withPendingUnitCount: 1)
        unit.completedUnitCount = 1
    }

    #if !canImport(Darwin)
    /// Held while a finish is counted in a queue's progress (see `countFinish(in:)`). It guards
    /// Foundation's state, not a value of ours, hence not a `Locked`: on a `Locked(())`, whose
    /// value is empty, Thread Sanitizer reported races between two `withLock` calls with this
    /// toolchain.
    private static let progressCounting = NSLock()
    #endif

    /// Hands the due retry to where the operation's attempts run (see the file comment), which
    /// submits ``Callout/beginAdmittedRetry`` there.
    func runDueRetryAtHome(_ home: AttemptHome) {
        switch home {
        case .anywhere:
            submit(.beginAdmittedRetry)
        case .dispatchQueue(let queue):
            queue.async { self.submitDueRetryHere() }
        case .starter(let starter):
            starter.post { self.submitDueRetryHere() }
        }
    }

    /// Records the calling thread as the one the due retry reached, and submits it.
    private func submitDueRetryHere() {
        machine.withLock { $0.threadReachedByDueRetry = ObjectIdentifier(Thread.current) }
        submit(.beginAdmittedRetry)
    }
}

/// Where the retries of an operation start (see the file comment).
enum AttemptHome: Sendable {
    /// Where the wait ended: a background thread.
    case anywhere
    /// On this dispatch queue.
    case dispatchQueue(DispatchQueue)
    /// On the thread that started a synchronous operation by hand.
    case starter(StarterThread)

    /// Where the retries of an operation started from `queue` (`nil`: by hand) start.
    init(startedBy queue: OperationQueue?, starter: StarterThread?) {
        if let queue, let dispatchQueue = RetryingOperation.dispatchQueue(runningOperationsOf: queue) {
            self = .dispatchQueue(dispatchQueue)
        } else if let starter {
            self = .starter(starter)
        } else {
            self = .anywhere
        }
    }

    var isAnywhere: Bool {
        if case .anywhere = self { return true }
        return false
    }
}
