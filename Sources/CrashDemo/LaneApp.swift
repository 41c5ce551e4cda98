import CrashHarness
import Foundation
import PersistentOperations

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The "app" child process of the lane soak: a chat outbox whose conversations are ordered
/// lanes. It restores the store, adds the messages not yet stored up to `--count`, and runs
/// until every message has ended. Any moment of it may be killed.
///
///     crash-demo lanes-app --store DIR --effects FILE --count N [--lanes L] [--attempt-ms MS]
///                          [--expires-ms MS] [--crash-loop-limit K] [--adds-before-restore]
///
/// Message `i` is the ``LanePlan``'s: lane `chat:(i % L)`, with the behaviour the plan gives
/// it. The app adds the messages in index order, each with a unique key (re-adding one whose
/// add a kill interrupted keeps the stored one), the expiring ones with an expiration date
/// `--expires-ms` (or a multiple of it: ``LanePlan/expiryScale(of:)``) after the add. It cancels, by identifier, each `cancelledWhileWaiting`
/// message right after its add, each restored message whose cancel an earlier launch asked
/// for, and each `cancelledWhileRunning` message during its attempts; it re-queues or purges
/// each failure that holds lane 0 (``LaneReleaser``). With `--adds-before-restore` it adds
/// before `restore()`, so that its adds into lanes with stored messages wait for them.
///
/// Effects lines: the ``LaneJournalEvent``s, each appended and synced before the app goes on.
struct LaneAppCommand {
    var store: URL
    var effects: String
    var count: Int
    var plan = LanePlan()
    var attemptMilliseconds = 10
    var expiresMilliseconds = 300
    var crashLoopLimit = PersistentOperationQueue.Configuration.defaultCrashLoopLimit
    var addsBeforeRestore = false
    /// Microseconds between two adds, so that adds and attempts interleave.
    var addPause: UInt32 = 2_000

    func run() throws {
        try Effects.open(effects)
        Effects.write(LaneJournalEvent.launch(pid: getpid(), addsBeforeRestore: addsBeforeRestore).line)
        let earlier = try EarlierMessages(effects: effects)
        let operationQueue = OperationQueue()
        // Room for two attempts per lane, so that a lane running two at once would show it.
        operationQueue.maxConcurrentOperationCount = plan.lanes * 2
        let queue = try PersistentOperationQueue(
            directory: store, operationQueue: operationQueue, configuration: .init(crashLoopLimit: crashLoopLimit)
        )
        queue.register(LaneMessageOperation.self)
        LaneMessageOperation.queue = queue
        let releaser = LaneReleaser(queue: queue, store: store, plan: plan)
        queue.eventHandler = { event in
            if case .laneHeld(_, let id) = event { releaser.release(id) }
        }

        var stored = earlier.known.union(try Self.messagesInFailedArea(of: store))
        var added = Set<PersistentOperationID>()
        if addsBeforeRestore {
            added = try addMessages(to: queue, skipping: stored)
        }
        // Suspended while restoring, so that nothing restored starts before it is journaled.
        operationQueue.isSuspended = true
        try queue.restore()
        for info in queue.operations() where !added.contains(info.id) {
            guard let message = (info.operation as? LaneMessageOperation)?.payload else { continue }
            Effects.write(LaneJournalEvent.restored(index: message.index, id: info.id.rawValue).line)
            stored.insert(message.index)
            if earlier.cancelRequested.contains(message.index) {
                Effects.write(LaneJournalEvent.cancelRequested(index: message.index).line)
                queue.cancelOperation(withID: info.id)
            }
        }
        // Failures that hold lanes, read back by the restore.
        try releaser.releaseStoredHolders()
        operationQueue.isSuspended = false
        if !addsBeforeRestore {
            // The restore moved messages that expired meanwhile to the failed area.
            stored.formUnion(try Self.messagesInFailedArea(of: store))
            _ = try addMessages(to: queue, skipping: stored)
        }

        while true {
            queue.waitUntilAllOperationsAreFinished()
            // A failure that holds a lane leaves the queue idle, its lane's messages waiting.
            let released = try releaser.releaseStoredHolders()
            if released == 0 {
                if try queue.counts().pending == 0 { break }
                usleep(10_000)
            }
        }
        Effects.write(LaneJournalEvent.finished.line)
        queue.close()
    }

    /// Adds the messages 0..<count not in `skipped`, in order; returns the identifiers of
    /// those stored now (not those whose unique key found them stored already).
    private func addMessages(to queue: PersistentOperationQueue, skipping skipped: Set<Int>) throws -> Set<PersistentOperationID> {
        var added = Set<PersistentOperationID>()
        for index in 0..<count where !skipped.contains(index) {
            let message = plan.message(index, attemptMilliseconds: attemptMilliseconds)
            var options = EnqueueOptions(
                uniqueKey: "message-\(index)", lane: plan.name(ofLane: message.lane), holdsLaneOnFailure: plan.holdsOnFailure(message.lane)
            )
            if let scale = plan.expiryScale(of: index) {
                options.expirationDate = Date().addingTimeInterval(scale * Double(expiresMilliseconds) / 1000)
            }
            let result = try queue.addOperation(LaneMessageOperation(payload: message), options: options)
            if result.disposition == .added { added.insert(result.id) }
            Effects.write(LaneJournalEvent.acknowledged(index: index, id: result.id.rawValue).line)
            if message.behaviour == .cancelledWhileWaiting {
                Effects.write(LaneJournalEvent.cancelRequested(index: index).line)
                queue.cancelOperation(withID: result.id)
            }
            usleep(addPause)
        }
        return added
    }

    /// The messages whose records sit in the failed area.
    static func messagesInFailedArea(of store: URL) throws -> Set<Int> {
        let records = try ReadOnlyPersistentStore(directory: store).failedRecords().records
        return Set(try records.map { try $0.decodePayload(as: LaneMessageOperation.self).index })
    }
}

/// Re-queues or purges, as the ``LanePlan`` says, each failed message that holds its lane,
/// journaling the request first; one at a time, on a serial queue of its own.
final class LaneReleaser: Sendable {
    private let queue: PersistentOperationQueue
    private let store: URL
    private let plan: LanePlan
    private let serial = DispatchQueue(label: "lanes-app.releaser")

    init(queue: PersistentOperationQueue, store: URL, plan: LanePlan) {
        self.queue = queue
        self.store = store
        self.plan = plan
    }

    /// Releases the lane that `id` holds (from a ``PersistentOperationEvent/laneHeld(lane:by:)``
    /// event), after the releases asked for before.
    func release(_ id: PersistentOperationID) {
        serial.async { [self] in
            do {
                _ = try releaseNow(id)
            } catch {
                FileHandle.standardError.write(Data("lanes-app: releasing the lane held by \(id) failed: \(error)\n".utf8))
            }
        }
    }

    /// Waits for the releases asked for, then releases every lane that a record of the failed
    /// area holds; returns how many it released.
    @discardableResult
    func releaseStoredHolders() throws -> Int {
        try serial.sync {
            var released = 0
            for holder in try ReadOnlyPersistentStore(directory: store).failedRecords().records where holder.isHoldingLane {
                if try releaseNow(holder.id) { released += 1 }
            }
            return released
        }
    }

    /// Re-queues or purges `id` when it is a failed record holding its lane; returns whether it was.
    private func releaseNow(_ id: PersistentOperationID) throws -> Bool {
        guard let record = try ReadOnlyPersistentStore(directory: store).record(withID: id),
              record.area == .failed, record.isHoldingLane else { return false }
        let index = try record.decodePayload(as: LaneMessageOperation.self).index
        if plan.requeuesOnHold(index) {
            Effects.write(LaneJournalEvent.requeueRequested(index: index).line)
            try queue.retryFailedOperation(withID: id)
        } else {
            Effects.write(LaneJournalEvent.purgeRequested(index: index).line)
            try queue.purgeFailedOperation(withID: id)
        }
        return true
    }
}

/// What the journal says earlier launches did with each message.
struct EarlierMessages {
    /// Messages durably stored — acknowledged, restored, started or cancelled — not to be added again.
    var known = Set<Int>()
    /// Messages whose cancel was asked for.
    var cancelRequested = Set<Int>()

    init(effects: String) throws {
        for event in try LaneJournalEvent.all(at: effects) {
            switch event {
            case .acknowledged(let index, _), .restored(let index, _), .started(let index, _, _, _), .ended(let index, _):
                known.insert(index)
            case .cancelRequested(let index):
                known.insert(index)
                cancelRequested.insert(index)
            default:
                break
            }
        }
    }
}
