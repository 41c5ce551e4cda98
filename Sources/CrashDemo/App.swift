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
///     crash-demo app --store DIR --effects FILE --count N [--crash-loop-limit K] [--crasher]
///
/// Effects lines (appended and synced): `launch PID restored=N quarantined=Q failed-after-crashes=F`,
/// `restored I id=ID` and `ack I id=ID` (once `addOperation` returned for operation I),
/// `start I attempt=A retries=R retry=B pid=P`, `retry I counted|uncounted`, `done I`, `fail I`
/// from the operations, `removed ID` / `moved-to-failed ID` from the queue's events (after
/// the record changed), and `finished`.
struct AppCommand {
    var store: URL
    var effects: String
    var count: Int
    var crashLoopLimit = PersistentOperationQueue.Configuration.defaultCrashLoopLimit
    var addsCrasher = false
    var attemptMilliseconds = 30

    func run() throws {
        try Effects.open(effects)
        let already = Self.acknowledged(in: effects)
        let operationQueue = OperationQueue()
        operationQueue.maxConcurrentOperationCount = 4
        let queue = try PersistentOperationQueue(
            directory: store, operationQueue: operationQueue,
            configuration: .init(crashLoopLimit: crashLoopLimit)
        )
        queue.register(DemoUpload.self)
        queue.eventHandler = { event in
            switch event {
            case .succeeded(let id): Effects.write("removed \(id)")
            case .failed(let id, _): Effects.write("moved-to-failed \(id)")
            default: break
            }
        }
        // Suspended while restoring, so that nothing finishes before it is journaled.
        operationQueue.isSuspended = true
        let report = try queue.restore()
        Effects.write("launch \(getpid()) restored=\(report.restored.count) quarantined=\(report.quarantined.count) failed-after-crashes=\(report.movedToFailedAfterCrashes.count)")
        for info in queue.operations() {
            if let upload = info.operation as? DemoUpload {
                Effects.write("restored \(upload.payload.index) id=\(info.id)")
            }
        }
        operationQueue.isSuspended = false

        var jobs = (0..<count).map { UploadJob(index: $0, behaviour: .forIndex($0), attemptMilliseconds: attemptMilliseconds) }
        if addsCrasher {
            jobs.append(UploadJob(index: count, behaviour: .crashesTheApp, attemptMilliseconds: attemptMilliseconds))
        }
        for job in jobs where !already.contains(job.index) {
            // The unique key makes re-adding after a kill between add and acknowledgement a no-op.
            let result = try queue.addOperation(DemoUpload(payload: job), options: EnqueueOptions(uniqueKey: "upload-\(job.index)"))
            Effects.write("ack \(job.index) id=\(result.id)")
        }
        queue.waitUntilAllOperationsAreFinished()
        Effects.write("finished")
    }

    /// The operations whose add was acknowledged, or that finished, in earlier launches.
    static func acknowledged(in effects: String) -> Set<Int> {
        guard let text = try? String(contentsOfFile: effects, encoding: .utf8) else { return [] }
        var indices = Set<Int>()
        for line in text.split(separator: "\n") {
            let words = line.split(separator: " ")
            if words.count >= 2, ["ack", "done", "fail"].contains(words[0]), let index = Int(words[1]) {
                indices.insert(index)
            }
        }
        return indices
    }
}
