import CrashHarness
import Foundation
import PersistentOperations

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The "app" child process: restores the store, adds the operations not yet acknowledged,
/// and runs until every operation has finished. Any moment of it may be killed.
///
///     crash-demo app --store DIR --effects FILE --count N [--albums A] [--crash-loop-limit K] [--crasher | --killer]
///                    [--max-concurrent W] [--inactive]
///
/// `--crasher` adds an upload that crashes the app on every attempt (a trap), `--killer` one
/// that gets it SIGKILLed on every attempt (as iOS kills an app for memory or a hang).
/// `--inactive` says the app is not active (``PersistentOperationQueue/applicationState``)
/// before restoring, so a kill of this launch counts against nobody.
///
/// It adds the A albums of ``DemoAlbum`` first (even ones as one batch, odd ones node by node,
/// each dependent after its prerequisites), then N independent uploads.
///
/// Effects lines (appended and synced): `launch PID restored=N quarantined=Q failed-after-crashes=F`,
/// `restored I id=ID` for each pending upload restored, `failed-area I,J` (the graph nodes in
/// the failed area after the restore, before anything runs), `add I after=P,Q batch=B` before
/// a graph node is added, `ack I id=ID [after=P,Q]` once `addOperation(s)` returned for
/// upload I, `skip I after=P` for a graph node not added because a prerequisite had failed,
/// `start I attempt=A retries=R retry=B pid=P`, `retry I counted|uncounted`, `done I`, `fail I`
/// from the operations, `removed ID` / `moved-to-failed ID` / `abandoned ID prerequisite=ID`
/// from the queue's events (after the record changed), and `finished`.
struct AppCommand {
    var store: URL
    var effects: String
    var count: Int
    var albums = 0
    var crashLoopLimit = PersistentOperationQueue.Configuration.defaultCrashLoopLimit
    var addsCrasher = false
    /// Adds an upload that gets the app SIGKILLed on every attempt (`--killer`).
    var addsKiller = false
    var attemptMilliseconds = 30
    /// The `OperationQueue`'s `maxConcurrentOperationCount`.
    var maximumConcurrentAttempts = 4
    /// Whether the app says it is not active for the whole launch.
    var isInactive = false
    /// The grace period of a shutdown on SIGTERM, in milliseconds.
    var graceMilliseconds = 500

    func run() throws {
        try Effects.open(effects)
        let earlier = try EarlierLaunches(effects: effects)
        let operationQueue = OperationQueue()
        operationQueue.maxConcurrentOperationCount = maximumConcurrentAttempts
        let queue = try PersistentOperationQueue(
            directory: store, operationQueue: operationQueue,
            configuration: .init(crashLoopLimit: crashLoopLimit)
        )
        // SIGTERM (a deploy, a supervisor's stop) shuts the queue down gracefully and exits 0;
        // the main thread then leaves the exit to it. Installed before the restore, so that a
        // SIGTERM during the restore leads to a clean stop too.
        let termination = Self.handleTermination(of: queue, grace: Double(graceMilliseconds) / 1000)
        defer { withExtendedLifetime(termination) {} }
        Effects.write("signals \(getpid())")
        do {
            try run(queue, operationQueue: operationQueue, earlier: earlier)
        } catch where Terminating.flag.isSet {
            Self.waitForTheShutdownsExit()   // an add refused by the closing queue
        }
        if Terminating.flag.isSet { Self.waitForTheShutdownsExit() }
    }

    /// Shuts `queue` down on SIGTERM, journals the shutdown's report and exits 0.
    static func handleTermination(of queue: PersistentOperationQueue, grace: TimeInterval) -> any DispatchSourceSignal {
        signal(SIGTERM, SIG_IGN)
        let source = DispatchSource.makeSignalSource(signal: SIGTERM, queue: DispatchQueue(label: "crash-demo.sigterm"))
        source.setEventHandler {
            Terminating.flag.set()
            Effects.write("sigterm \(getpid())")
            // The launch's restore is journaled whole first (the soak's checks read what it
            // restored): a shutdown lets a restore in progress finish anyway.
            Terminating.flag.waitUntilRestoreJournaled()
            let report = queue.shutDownAndWait(gracePeriod: grace)
            Effects.write("shutdown ended=\(report.endedInGracePeriod.count) stopped=\(report.stopped.count) still-running=\(report.stillRunning.count) seconds=\(String(format: "%.3f", report.duration))")
            exit(0)
        }
        source.resume()
        return source
    }

    /// Blocks the main thread while the SIGTERM handler shuts down and exits.
    static func waitForTheShutdownsExit() -> Never {
        while true { sleep(60) }
    }

    private func run(_ queue: PersistentOperationQueue, operationQueue: OperationQueue, earlier: EarlierLaunches) throws {
        queue.register(DemoUpload.self)
        queue.eventHandler = { event in
            switch event {
            case .succeeded(let id): Effects.write("removed \(id)")
            case .failed(let id, _): Effects.write("moved-to-failed \(id)")
            case .abandoned(let id, let prerequisite): Effects.write("abandoned \(id) prerequisite=\(prerequisite)")
            default: break
            }
        }
        if isInactive { queue.applicationState = .inactive }
        // Suspended while restoring, so that nothing finishes before it is journaled.
        operationQueue.isSuspended = true
        let report = try queue.restore()
        Effects.write("launch \(getpid()) restored=\(report.restored.count) quarantined=\(report.quarantined.count) failed-after-crashes=\(report.movedToFailedAfterCrashes.count) previous=\(report.previousLaunchApplicationState.rawValue)")
        var restored: [Int: DemoUpload] = [:]
        for info in queue.operations() {
            if let upload = info.operation as? DemoUpload {
                Effects.write("restored \(upload.payload.index) id=\(info.id)")
                restored[upload.payload.index] = upload
            }
        }
        let failedNodes = albums > 0 ? try Self.graphNodesInFailedArea(of: store) : []
        Effects.write((["failed-area"] + (failedNodes.isEmpty ? [] : [failedNodes.sorted().map(String.init).joined(separator: ",")])).joined(separator: " "))
        Terminating.flag.restoreJournaled()
        operationQueue.isSuspended = false

        let graph = GraphAdder(
            queue: queue, earlier: earlier, restored: restored, failed: failedNodes, attemptMilliseconds: attemptMilliseconds
        )
        for album in 0..<albums {
            try graph.add(DemoAlbum(number: album))
        }

        var jobs = (0..<count).map { UploadJob(index: $0, behaviour: .forIndex($0), attemptMilliseconds: attemptMilliseconds) }
        if addsCrasher {
            jobs.append(UploadJob(index: count, behaviour: .crashesTheApp, attemptMilliseconds: attemptMilliseconds))
        } else if addsKiller {
            jobs.append(UploadJob(index: count, behaviour: .killsTheApp, attemptMilliseconds: attemptMilliseconds))
        }
        // An upload restored in this launch is stored already, and may have finished and freed its
        // unique key by now (the albums above take time to add): adding it again would run it again.
        // So is one that an earlier launch started: it may have crashed that launch before its add
        // was acknowledged (a crasher's attempt can start and trap before `addOperation` returns),
        // and may sit in the failed area now, where its unique key is free again.
        for job in jobs where !earlier.stored.contains(job.index) && restored[job.index] == nil {
            // The unique key makes re-adding after a kill between add and acknowledgement a no-op.
            let result = try queue.addOperation(DemoUpload(payload: job), options: EnqueueOptions(uniqueKey: "upload-\(job.index)"))
            Effects.write("ack \(job.index) id=\(result.id)")
        }
        queue.waitUntilAllOperationsAreFinished()
        if Terminating.flag.isSet { Self.waitForTheShutdownsExit() }
        Effects.write("finished")
        withExtendedLifetime(graph) {}
    }

    /// The graph nodes whose records sit in the failed area.
    static func graphNodesInFailedArea(of store: URL) throws -> Set<Int> {
        var indices = Set<Int>()
        for record in try ReadOnlyPersistentStore(directory: store).failedRecords().records {
            if let job = try? record.decodePayload(as: DemoUpload.self), AlbumGraph.node(of: job.index) != nil {
                indices.insert(job.index)
            }
        }
        return indices
    }
}

/// What the journal says earlier launches did.
struct EarlierLaunches {
    /// Uploads that were durably stored — acknowledged, started, restored or finished — and are
    /// not to be added again.
    var stored = Set<Int>()
    /// Uploads whose success was journaled.
    var done = Set<Int>()

    init(effects: String) throws {
        guard FileManager.default.fileExists(atPath: effects) else { return }
        for event in try JournalTail.allEvents(at: effects) {
            switch event {
            case .done(let index):
                stored.insert(index)
                done.insert(index)
            case .acknowledged(let index, _, _), .failed(let index), .started(let index, _, _), .restored(let index, _):
                stored.insert(index)
            default:
                break
            }
        }
    }
}

/// Adds the demo's albums (``DemoAlbum``), each node once across launches: an album or node
/// that an earlier launch stored (journaled, restored now, or in the failed area) is not added
/// again. Holds every operation it made until the app exits (Linux Foundation's `Operation`
/// keeps unretained references from a prerequisite to its dependents).
final class GraphAdder {
    private let queue: PersistentOperationQueue
    private let earlier: EarlierLaunches
    private let restored: [Int: DemoUpload]
    private let failed: Set<Int>
    private let attemptMilliseconds: Int
    /// Operations of this launch by index: restored ones and those added now.
    private var live: [Int: DemoUpload]
    private var made: [DemoUpload] = []

    init(queue: PersistentOperationQueue, earlier: EarlierLaunches, restored: [Int: DemoUpload], failed: Set<Int>, attemptMilliseconds: Int) {
        self.queue = queue
        self.earlier = earlier
        self.restored = restored
        self.failed = failed
        self.attemptMilliseconds = attemptMilliseconds
        live = restored
    }

    func add(_ album: DemoAlbum) throws {
        if album.isAddedAsBatch {
            try addBatch(album)
        } else {
            for node in album.nodes {
                try addSingle(node)
            }
        }
    }

    private func wasStored(_ index: Int) -> Bool {
        earlier.stored.contains(index) || restored[index] != nil || failed.contains(index)
    }

    private func makeUpload(_ node: DemoAlbum.Node) -> DemoUpload {
        let upload = DemoUpload(payload: UploadJob(index: node.index, behaviour: node.behaviour, attemptMilliseconds: attemptMilliseconds))
        made.append(upload)
        return upload
    }

    private static func after(_ prerequisites: [Int]) -> String {
        prerequisites.isEmpty ? "" : " after=" + prerequisites.map(String.init).joined(separator: ",")
    }

    /// The whole album in one `addOperations` call, unless a launch already stored it (a batch
    /// is stored all or none, so one member found means all were).
    private func addBatch(_ album: DemoAlbum) throws {
        let nodes = album.nodes
        guard !nodes.contains(where: { wasStored($0.index) }) else { return }
        var uploads: [Int: DemoUpload] = [:]
        for node in nodes {
            let upload = makeUpload(node)
            for prerequisite in node.prerequisites {
                upload.addDependency(uploads[prerequisite]!)
            }
            uploads[node.index] = upload
        }
        for node in nodes {
            Effects.write("add \(node.index)\(Self.after(node.prerequisites)) batch=\(album.batchName)")
        }
        let ids = try queue.addOperations(nodes.map { uploads[$0.index]! })
        for (node, id) in zip(nodes, ids) {
            Effects.write("ack \(node.index) id=\(id)\(Self.after(node.prerequisites))")
            live[node.index] = uploads[node.index]
        }
    }

    /// One node with `addOperation`, depending on the live operations of its prerequisites;
    /// a prerequisite that succeeded in an earlier launch (its record gone) needs none. A
    /// node whose prerequisite failed for good is not added (`skip`).
    private func addSingle(_ node: DemoAlbum.Node) throws {
        guard !wasStored(node.index) else { return }
        var prerequisites: [DemoUpload] = []
        for prerequisite in node.prerequisites {
            if let operation = live[prerequisite] {
                prerequisites.append(operation)
            } else if !earlier.done.contains(prerequisite) {
                // Failed for good (or not added itself): this node can never run.
                Effects.write("skip \(node.index)\(Self.after([prerequisite]))")
                return
            }
        }
        let upload = makeUpload(node)
        for prerequisite in prerequisites {
            upload.addDependency(prerequisite)
        }
        Effects.write("add \(node.index)\(Self.after(node.prerequisites))")
        do {
            let id = try queue.addOperation(upload, options: EnqueueOptions()).id
            Effects.write("ack \(node.index) id=\(id)\(Self.after(node.prerequisites))")
            live[node.index] = upload
        } catch let error as PersistenceError where error.code == .prerequisiteFailed {
            Effects.write("skip \(node.index)\(Self.after(node.prerequisites))")
        }
    }
}

/// Whether SIGTERM arrived.
final class Terminating: @unchecked Sendable {
    // @unchecked: `value` is only touched under `lock`.
    static let flag = Terminating()
    private let lock = NSLock()
    private var value = false

    private let journaled = DispatchSemaphore(value: 0)

    func set() { lock.withLock { value = true } }
    var isSet: Bool { lock.withLock { value } }

    /// The main thread journaled what the restore restored.
    func restoreJournaled() { journaled.signal() }

    /// Waits until the main thread journaled the restore (at most 60 s: a restore that
    /// throws ends the app anyway).
    func waitUntilRestoreJournaled() {
        if journaled.wait(timeout: .now() + 60) == .success { journaled.signal() }
    }
}
