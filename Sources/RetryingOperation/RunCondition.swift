import Foundation
#if canImport(Network)
import Network
#endif

/// Something that must hold before an attempt starts — the network is reachable, the device is
/// charging, the user is signed in — and that says when it changes.
///
/// A condition is read often and from any thread: ``isSatisfied`` must be cheap. Instead of
/// being polled, it calls the handlers registered with ``observeChanges(_:)`` after each change.
/// ``ManualRunCondition`` is one you set yourself (and what tests use). A plain
/// ``RetryingOperation`` waits for one with a ``RunConditionRetryHelper``; a persistent queue
/// (module `PersistentOperations`) registers conditions by name and holds back the operations
/// stored with that name until it holds.
///
/// ```swift
/// final class SignedIn: RunCondition, @unchecked Sendable {
///     private let observers = ManualRunCondition()   // reuse its bookkeeping
///     var isSatisfied: Bool { observers.isSatisfied }
///     func observeChanges(_ handler: @escaping @Sendable () -> Void) -> any RunConditionObservation {
///         observers.observeChanges(handler)
///     }
///     func sessionChanged(signedIn: Bool) { observers.isSatisfied = signedIn }
/// }
/// ```
public protocol RunCondition: AnyObject, Sendable {
    /// Whether the condition holds now. Cheap, thread-safe, never blocking.
    var isSatisfied: Bool { get }

    /// Calls `handler`, on any thread, after each change of ``isSatisfied`` (a call without a
    /// change is harmless), until the returned observation is cancelled.
    func observeChanges(_ handler: @escaping @Sendable () -> Void) -> any RunConditionObservation
}

/// A registration of ``RunCondition/observeChanges(_:)``.
public protocol RunConditionObservation: Sendable {
    /// Stops the calls of the handler (one already under way may still finish).
    func cancel()
}

/// A ``RunCondition`` you set by hand: tests flip it, and an app can drive it from whatever
/// tells it the state (a reachability callback, a power notification).
///
/// Setting ``isSatisfied`` to a new value calls every observer once, on the setting thread,
/// after the value has changed and outside any lock; setting the value it already has calls
/// nobody.
///
/// ```swift
/// let online = ManualRunCondition(isSatisfied: false)
/// reachability.onReachable = { online.isSatisfied = true }
/// ```
public final class ManualRunCondition: RunCondition, @unchecked Sendable {
    // @unchecked: all mutable state is in `state`, a `Locked`.
    private struct State: Sendable {
        var isSatisfied: Bool
        var observers: [UInt64: @Sendable () -> Void] = [:]
        var nextToken: UInt64 = 0
    }

    private let state: Locked<State>

    /// Creates a condition that holds (or not) from the start.
    public init(isSatisfied: Bool = false) {
        state = Locked(State(isSatisfied: isSatisfied))
    }

    /// Whether the condition holds. Setting a new value tells every observer.
    public var isSatisfied: Bool {
        get { state.withLock { $0.isSatisfied } }
        set {
            let observers = state.withLock { state -> [@Sendable () -> Void] in
                guard state.isSatisfied != newValue else { return [] }
                state.isSatisfied = newValue
                return state.observers.sorted { $0.key < $1.key }.map(\.value)
            }
            for observer in observers { observer() }
        }
    }

    /// The number of observers registered and not cancelled.
    public var observerCount: Int {
        state.withLock { $0.observers.count }
    }

    public func observeChanges(_ handler: @escaping @Sendable () -> Void) -> any RunConditionObservation {
        let token = state.withLock { state -> UInt64 in
            state.nextToken += 1
            state.observers[state.nextToken] = handler
            return state.nextToken
        }
        return ManualObservation(condition: self, token: token)
    }

    fileprivate func removeObserver(_ token: UInt64) {
        _ = state.withLock { $0.observers.removeValue(forKey: token) }
    }
}

private struct ManualObservation: RunConditionObservation {
    weak var condition: ManualRunCondition?
    let token: UInt64

    func cancel() {
        condition?.removeObserver(token)
    }
}

/// A retry helper that ends a wait as soon as a ``RunCondition`` holds — at once if it already
/// does — without polling. The retry starts where the operation's retries run (a background
/// thread unless a synchronous operation's queue runs operations on a dispatch queue of its
/// own), never inline on the thread that changed the condition.
///
/// ```swift
/// let online = ManualRunCondition(isSatisfied: false)   // set by your reachability code
/// // Offline: wait for the network without spending a retry.
/// baseOperationEnded(retryHelpers: [RunConditionRetryHelper(condition: online, retryingOperation: self)],
///                    countsTowardRetryLimit: false)
/// ```
public final class RunConditionRetryHelper: RetryHelper, @unchecked Sendable {
    // @unchecked: `operation` and `condition` are written only in `init`; `observation` is a `Locked`.

    /// The condition the wait is for.
    public let condition: any RunCondition
    private weak var operation: RetryingOperation?
    private let observation = Locked<(any RunConditionObservation)?>(nil)

    /// Creates a helper that retries `retryingOperation` once `condition` holds.
    public init(condition: any RunCondition, retryingOperation: RetryingOperation) {
        self.condition = condition
        self.operation = retryingOperation
    }

    /// Starts observing the condition; retries at once if it already holds.
    public func setup() {
        guard let operation else { return }
        let wait = operation.currentWaitGeneration
        let condition = condition
        let retry: @Sendable () -> Void = { [weak operation] in
            guard condition.isSatisfied else { return }
            operation?.conditionHelperFired(forWait: wait)
        }
        observation.withLock { $0 = condition.observeChanges(retry) }
        retry()
    }

    /// Stops observing. Called by the operation when its wait ends.
    public func teardown() {
        observation.withLock { observation in
            defer { observation = nil }
            return observation
        }?.cancel()
    }
}

extension RetryingOperation {
    /// A ``RunConditionRetryHelper`` of wait `generation` saw its condition hold. The retry
    /// starts where the operation's attempts run, never inline on the thread that changed the
    /// condition (which may hold locks an attempt takes).
    func conditionHelperFired(forWait generation: UInt64) {
        submitInBackground(.timerFired(generation: generation))
    }
}

#if canImport(Network)
/// A ``RunCondition`` that holds while the device has a usable network path, observed with
/// `NWPathMonitor` (Apple platforms only: `let online = NetworkPathCondition()`). It cannot be
/// compiled on Linux, where the package is built and tested, so it is kept to these few lines.
public final class NetworkPathCondition: RunCondition, @unchecked Sendable {
    // @unchecked: `monitor` is thread-safe; the rest is a `ManualRunCondition`.
    private let monitor: NWPathMonitor
    private let value = ManualRunCondition()

    /// Starts monitoring the paths of `interfaceType`, or of every interface when `nil`.
    public init(requiredInterfaceType interfaceType: NWInterface.InterfaceType? = nil) {
        monitor = interfaceType.map { NWPathMonitor(requiredInterfaceType: $0) } ?? NWPathMonitor()
        let value = value
        monitor.pathUpdateHandler = { path in value.isSatisfied = path.status == .satisfied }
        monitor.start(queue: DispatchQueue(label: "NetworkPathCondition"))
    }

    deinit {
        monitor.cancel()
    }

    public var isSatisfied: Bool { value.isSatisfied }

    public func observeChanges(_ handler: @escaping @Sendable () -> Void) -> any RunConditionObservation {
        value.observeChanges(handler)
    }
}
#endif
