import Foundation

// The app's lifecycle, for crash-loop protection: a kill while the app is active and one
// operation runs alone is evidence against that operation (iOS kills an app that exhausts
// memory or hangs); a kill while it is not active is evidence against nobody (iOS kills
// suspended and background apps routinely, and the user's swipe-away comes after the app
// resigned active). The state is written to the store's launch evidence
// (`RecordStore.noteApplicationState`), only when it changes, off every hot path.

extension PersistentOperationQueue {
    /// Whether the app is in the foreground and active, as crash-loop protection sees it.
    ///
    /// ```swift
    /// queue.applicationState = .inactive   // about to be suspended: a kill now blames nobody
    /// ```
    public enum ApplicationState: String, Sendable, Hashable, Codable {
        /// In the foreground, receiving events: a kill by the system now (memory, watchdog)
        /// was most likely caused by the app's own work.
        case active
        /// Not active (resigning, in the background, suspended): the system kills such apps
        /// routinely, and a kill now counts against no operation.
        case inactive
    }

    /// What the app says of its state, for crash-loop protection; ``ApplicationState/active``
    /// when a queue opens.
    ///
    /// On iOS, tvOS and visionOS (and in app extensions) the queue follows the application's
    /// lifecycle notifications by itself, by name through `NotificationCenter.default`: it is
    /// ``ApplicationState/inactive`` from `UIApplicationWillResignActiveNotification` (and
    /// `…DidEnterBackground…`) until `UIApplicationDidBecomeActiveNotification`. Elsewhere —
    /// or when your app is launched in the background, where no "did become active" comes —
    /// set it yourself. The state is written, unsynced, with the store's launch evidence, so
    /// that the next launch knows whether a kill came while the app was active: a launch
    /// killed while an operation's attempt ran alone and the app was active counts against
    /// that operation (see ``Configuration/crashLoopLimit``); one killed while the app was
    /// not active counts against nobody.
    ///
    /// ```swift
    /// // A daemon or a test that knows it is about to be stopped from outside:
    /// queue.applicationState = .inactive
    /// // … and when it is back at work:
    /// queue.applicationState = .active
    /// ```
    ///
    /// Thread safety: may be set from any thread; the last change wins.
    public var applicationState: ApplicationState {
        get { lifecycle.withLock { $0.state } }
        set {
            // The file is written under this lock so that two changes reach it in their order;
            // the lock guards nothing else and no user code runs under it.
            lifecycle.withLock { lifecycle in
                guard lifecycle.state != newValue else { return }
                lifecycle.state = newValue
                store.noteApplicationState(isActive: newValue == .active)
                guard configuration.releasesStoreLockWhenInactive else { return }
                if newValue == .inactive {
                    store.suspendLock()
                } else {
                    do {
                        try store.resumeLock()
                    } catch {
                        log(.error, "\(error)")
                    }
                }
            }
        }
    }

    /// The lifecycle notifications the queue follows, by name, and the state each one means.
    static var applicationLifecycleNotifications: [(name: Notification.Name, state: ApplicationState)] {
        #if canImport(UIKit)
        return [
            (Notification.Name("UIApplicationDidBecomeActiveNotification"), .active),
            (Notification.Name("UIApplicationWillResignActiveNotification"), .inactive),
            (Notification.Name("UIApplicationDidEnterBackgroundNotification"), .inactive),
            (Notification.Name("NSExtensionHostDidBecomeActiveNotification"), .active),
            (Notification.Name("NSExtensionHostWillResignActiveNotification"), .inactive),
            (Notification.Name("NSExtensionHostDidEnterBackgroundNotification"), .inactive),
        ]
        #else
        return []
        #endif
    }

    /// What the queue keeps of the app's lifecycle.
    struct LifecycleState: Sendable {
        var state = ApplicationState.active
        var observers: [LifecycleObserver] = []
    }

    /// One observation of a lifecycle notification.
    struct LifecycleObserver: @unchecked Sendable {
        // @unchecked: the token and the center are only used to remove the observation, which
        // `NotificationCenter` allows from any thread.
        let center: NotificationCenter
        let token: NSObjectProtocol
    }

    /// Follows `notifications` posted to `center`: each sets ``applicationState``.
    func observeApplicationLifecycle(in center: NotificationCenter, notifications: [(name: Notification.Name, state: ApplicationState)]) {
        guard !notifications.isEmpty else { return }
        let observers = notifications.map { notification in
            let state = notification.state
            let token = center.addObserver(forName: notification.name, object: nil, queue: nil) { [weak self] _ in
                self?.applicationState = state
            }
            return LifecycleObserver(center: center, token: token)
        }
        lifecycle.withLock { $0.observers += observers }
    }

    /// Stops following the lifecycle notifications (at close).
    func stopObservingApplicationLifecycle() {
        let observers = lifecycle.withLock { lifecycle -> [LifecycleObserver] in
            defer { lifecycle.observers = [] }
            return lifecycle.observers
        }
        for observer in observers {
            observer.center.removeObserver(observer.token)
        }
    }
}
