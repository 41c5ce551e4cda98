import Foundation

/// Delivers events in order, on a private serial queue, to a handler and to any number of
/// `AsyncStream`s. Never runs a handler while a lock is held.
/// What reads the subject of an event's operation (the queue).
protocol EventSubjectSource: AnyObject, Sendable {
    func subject(for event: PersistentOperationEvent) -> PersistentOperationEvent.Subject?
}

final class EventHub: Sendable {
    private struct Subscribers {
        var handler: (@Sendable (PersistentOperationEvent) -> Void)?
        /// The handler that also gets the subject of each event, read when it is emitted.
        var subjectHandler: (@Sendable (PersistentOperationEvent, PersistentOperationEvent.Subject?) -> Void)?
        /// The observers added by `PersistentOperationQueue.addEventObserver(_:)`, called
        /// after the handlers, in the order they were added.
        var observers: [(key: UInt64, observer: @Sendable (PersistentOperationEvent, PersistentOperationEvent.Subject?) -> Void)] = []
        var streams: [UInt64: AsyncStream<PersistentOperationEvent>.Continuation] = [:]
        /// The queue's own observers (bounded runs), called before the handler.
        var monitors: [ObjectIdentifier: @Sendable (PersistentOperationEvent) -> Void] = [:]
        /// Monitors whose registration waits on the delivery queue (see ``addMonitor(_:_:)``).
        var monitorsToRegister = 0
        var nextKey: UInt64 = 0
    }

    private let delivery = DispatchQueue(label: "PersistentOperationQueue.events")
    private let subscribers = Locked(Subscribers())

    /// What waits for delivery, in order: events with their subjects, and bodies to run among
    /// them (log messages, registrations, the end of the streams). One drain on the delivery
    /// queue takes everything emitted meanwhile, so a burst of events costs one hop, not one
    /// per event.
    private enum Item: Sendable {
        case events([PersistentOperationEvent], subjects: [PersistentOperationEvent.Subject?])
        case body(@Sendable () -> Void)
    }

    private struct Outbox: Sendable {
        var items: [Item] = []
        /// A drain is queued or running: it delivers what is appended before it ends.
        var isDraining = false
        /// When the last drain ended (`DispatchTime` uptime, nanoseconds).
        var lastDrainEnded: UInt64 = 0
    }

    /// How long a drain waits when the previous one ended less than this ago: under a steady
    /// stream of events, one hop delivers a millisecond's worth of them instead of waking
    /// the delivery queue for each.
    private static let coalescingDelay: UInt64 = 1_000_000

    private let outbox = Locked(Outbox())

    /// Appends `item` to the outbox, and queues a drain unless one is already on its way.
    private func post(_ item: Item) {
        let now = DispatchTime.now().uptimeNanoseconds
        let drain = outbox.withLock { outbox -> (needed: Bool, isBusy: Bool) in
            outbox.items.append(item)
            defer { outbox.isDraining = true }
            return (!outbox.isDraining, now &- outbox.lastDrainEnded < Self.coalescingDelay)
        }
        guard drain.needed else { return }
        if drain.isBusy {
            delivery.asyncAfter(deadline: DispatchTime(uptimeNanoseconds: now + Self.coalescingDelay)) { self.drain() }
        } else {
            delivery.async { self.drain() }
        }
    }

    /// Delivers the outbox's items, in order, until it is empty. On the delivery queue.
    ///
    /// `endsDrain`: whether this is the drain `post` queued, which marks the outbox as no longer
    /// draining when it finds it empty (atomically with finding it empty, so that an item
    /// posted meanwhile queues a drain of its own); a flush delivers what waits and leaves
    /// that to the drain on its way.
    private func drain(endsDrain: Bool = true) {
        while true {
            let items = outbox.withLock { outbox -> [Item] in
                if outbox.items.isEmpty, endsDrain {
                    outbox.isDraining = false
                    outbox.lastDrainEnded = DispatchTime.now().uptimeNanoseconds
                }
                defer { outbox.items = [] }
                return outbox.items
            }
            if items.isEmpty { return }
            deliver(items)
        }
    }

    var handler: (@Sendable (PersistentOperationEvent) -> Void)? {
        get { subscribers.withLock { $0.handler } }
        set { subscribers.withLock { $0.handler = newValue } }
    }

    var subjectHandler: (@Sendable (PersistentOperationEvent, PersistentOperationEvent.Subject?) -> Void)? {
        get { subscribers.withLock { $0.subjectHandler } }
        set { subscribers.withLock { $0.subjectHandler = newValue } }
    }

    /// Where the subject of an event's operation is read (the queue's entries), when the event
    /// is emitted and only while a subject handler is set. Asked without any of the hub's
    /// locks held; never call ``emit(_:)`` while holding the lock it takes. (Held weakly: the
    /// queue holds the hub.)
    private let subjectSource = Locked(WeakSubjectSource())

    private struct WeakSubjectSource: @unchecked Sendable {
        // @unchecked: only reached through `Locked`, and the source is `Sendable`.
        weak var source: (any EventSubjectSource)?
    }

    func setSubjectSource(_ source: any EventSubjectSource) {
        subjectSource.withLock { $0.source = source }
    }

    /// Adds an observer of every event emitted from now on, with its subject; returns the key
    /// that removes it.
    func addObserver(_ observer: @escaping @Sendable (PersistentOperationEvent, PersistentOperationEvent.Subject?) -> Void) -> UInt64 {
        subscribers.withLock { subscribers in
            subscribers.nextKey += 1
            subscribers.observers.append((subscribers.nextKey, observer))
            return subscribers.nextKey
        }
    }

    func removeObserver(_ key: UInt64) {
        subscribers.withLock { $0.observers.removeAll { $0.key == key } }
    }

    /// Whether the subjects of events are read: a subject handler or an observer is set.
    private static func needsSubjects(_ subscribers: Subscribers) -> Bool {
        subscribers.subjectHandler != nil || !subscribers.observers.isEmpty
    }

    /// A new stream of every event emitted from now on.
    func makeStream() -> AsyncStream<PersistentOperationEvent> {
        let (stream, continuation) = AsyncStream.makeStream(of: PersistentOperationEvent.self)
        let key = subscribers.withLock { subscribers in
            subscribers.nextKey += 1
            subscribers.streams[subscribers.nextKey] = continuation
            return subscribers.nextKey
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.subscribers.withLock { $0.streams.removeValue(forKey: key) }
        }
        return stream
    }

    /// Adds an observer of the queue's own, called with every event before the handler, on
    /// the delivery queue: it sees every event emitted after this call and none emitted before
    /// (those still waiting for delivery included).
    func addMonitor(_ key: ObjectIdentifier, _ monitor: @escaping @Sendable (PersistentOperationEvent) -> Void) {
        // Counted at once, so that the events emitted until the registration runs are queued
        // for it rather than dropped for want of subscribers.
        subscribers.withLock { $0.monitorsToRegister += 1 }
        post(.body {
            self.subscribers.withLock { subscribers in
                subscribers.monitors[key] = monitor
                subscribers.monitorsToRegister -= 1
            }
        })
    }

    func removeMonitor(_ key: ObjectIdentifier) {
        subscribers.withLock { _ = $0.monitors.removeValue(forKey: key) }
    }

    /// Whether anyone listens. Events emitted while no one does are dropped at once rather
    /// than queued for delivery: a dispatch to the delivery queue wakes a thread, three times
    /// in every operation's lifecycle.
    var hasSubscribers: Bool {
        subscribers.withLock { Self.listens($0) }
    }

    private static func listens(_ subscribers: Subscribers) -> Bool {
        subscribers.handler != nil || needsSubjects(subscribers) || !subscribers.streams.isEmpty
            || !subscribers.monitors.isEmpty || subscribers.monitorsToRegister > 0
    }

    func emit(_ event: PersistentOperationEvent) {
        emit(contentsOf: [event])
    }

    /// Emits the events of operations stored just now, whose entries may not exist yet: their
    /// subjects are their records'.
    func emit(enqueued records: [OperationRecord]) {
        // Nothing is made for no one (a large batch would make an event of each member).
        let (listens, needsSubjects) = subscribers.withLock { (Self.listens($0), Self.needsSubjects($0)) }
        guard listens else { return }
        emit(
            contentsOf: records.map { .enqueued(PersistentOperationID(record: $0.id), typeIdentifier: $0.typeIdentifier) },
            subjects: !needsSubjects ? nil : records.map {
                PersistentOperationEvent.Subject(
                    typeIdentifier: $0.typeIdentifier, tags: Set($0.tags), lane: $0.lane,
                    attempt: $0.numberOfAttempts, attemptDuration: nil, enqueuedAt: $0.enqueuedAt
                )
            }
        )
    }

    /// Emits `events` in order, with one hop to the delivery queue for all of them.
    /// `subjects`: the subject of each event, when the caller knows them; otherwise they are
    /// read from ``subjectProvider`` (only while a subject handler is set).
    func emit(contentsOf events: [PersistentOperationEvent], subjects known: [PersistentOperationEvent.Subject?]? = nil) {
        guard !events.isEmpty else { return }
        let (listens, needsSubjects) = subscribers.withLock { (Self.listens($0), Self.needsSubjects($0)) }
        guard listens else { return }
        // The subjects are read now: by delivery time, an operation that ended is forgotten.
        let source = needsSubjects ? subjectSource.withLock { $0.source } : nil
        let subjects = source.map { source in known ?? events.map(source.subject(for:)) } ?? []
        post(.events(events, subjects: subjects))
    }

    private func deliver(_ items: [Item]) {
        for item in items {
            switch item {
            case .events(let events, let subjects): deliver(events, subjects: subjects)
            case .body(let body): body()
            }
        }
    }

    /// Delivers `events` to the subscribers of the moment. On the delivery queue.
    private func deliver(_ events: [PersistentOperationEvent], subjects: [PersistentOperationEvent.Subject?]) {
        let (handler, subjectHandler, streams, monitors, observers) = subscribers.withLock {
            ($0.handler, $0.subjectHandler, Array($0.streams.values), $0.monitors, $0.observers)
        }
        for (index, event) in events.enumerated() {
            for monitor in monitors.values { monitor(event) }
            handler?(event)
            let subject = index < subjects.count ? subjects[index] : nil
            subjectHandler?(event, subject)
            for observer in observers { observer.observer(event, subject) }
            for stream in streams {
                stream.yield(event)
            }
        }
    }

    /// Runs `body` on the delivery queue, after the events emitted before it.
    func deliver(_ body: @escaping @Sendable () -> Void) {
        post(.body(body))
    }

    /// Waits until every event emitted so far has been delivered: delivers what waits in the
    /// outbox now, on the delivery queue, rather than waiting for a coalescing drain's delay.
    func flush() {
        delivery.sync { self.drain(endsDrain: false) }
    }

    func finishStreams() {
        let streams = subscribers.withLock { subscribers in
            defer { subscribers.streams = [:] }
            return Array(subscribers.streams.values)
        }
        post(.body {
            for stream in streams { stream.finish() }
        })
    }
}
