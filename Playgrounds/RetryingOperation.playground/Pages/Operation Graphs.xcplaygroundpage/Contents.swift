/*:
 [Previous](@previous)

 # Operation graphs

 Dependencies between persistent operations are set the usual way, `addDependency(_:)`
 before adding, and the queue saves them: a dependent starts only once each prerequisite has
 *succeeded*, in this launch or a later one. `addOperations` stores a whole graph at once,
 all or none.
 */
import Foundation
import PersistentOperations

struct Step: Codable, Sendable {
    var name: String
    var fails: Bool = false
}

/// Where steps leave a trace for the page to read: any thread may use it.
final class Trace: @unchecked Sendable {
    // @unchecked: `lines` is only touched while `lock` is held.
    private let lock = NSLock()
    private var lines: [String] = []
    func add(_ line: String) { lock.lock(); lines.append(line); lock.unlock() }
    var all: [String] { lock.lock(); defer { lock.unlock() }; return lines }
}
let trace = Trace()

struct StepFailed: Error {}

final class RunStep: RetryingOperation, PersistentOperation, @unchecked Sendable {
    // @unchecked: `payload` is immutable; the rest belongs to RetryingOperation.
    static let persistenceIdentifier = "playground.run-step"
    let payload: Step

    init(payload: Step) {
        self.payload = payload
        super.init()
    }

    override var isAsynchronous: Bool { false }

    override func startBaseOperation(isRetry: Bool) {
        trace.add(payload.name)
        if payload.fails {
            baseOperationEnded(failingWith: StepFailed())
        } else {
            baseOperationEnded()
        }
    }
}

let storeURL = FileManager.default.temporaryDirectory
    .appendingPathComponent("playground-graph-\(UUID().uuidString)")
//: ## First launch: store a diamond, then "crash" before it runs
do {
    let operations = OperationQueue()
    operations.isSuspended = true
    let queue = try PersistentOperationQueue(directory: storeURL, operationQueue: operations)
    queue.register(RunStep.self)
    let album = RunStep(payload: Step(name: "create album"))
    let photos = ["upload photo 1", "upload photo 2"].map { RunStep(payload: Step(name: $0)) }
    let publish = RunStep(payload: Step(name: "publish album"))
    for photo in photos {
        photo.addDependency(album)
        publish.addDependency(photo)
    }
    try queue.addOperations([album] + photos + [publish])
    let waiting = try queue.counts().waitingForPrerequisites
    precondition(waiting == 3)
    queue.close()
}
//: ## Next launch: the graph is restored and runs in order
do {
    let queue = try PersistentOperationQueue(directory: storeURL)
    queue.register(RunStep.self)
    let report = try queue.restore()
    precondition(report.restored.count == 4)
    queue.waitUntilAllOperationsAreFinished()
    print(trace.all)
    precondition(trace.all.first == "create album" && trace.all.last == "publish album")
    queue.close()                                       // lets the next block open the store
}
//: ## A failure takes its dependents with it
//: When a prerequisite fails for good, its dependents move to the failed area too, naming it.
do {
    let queue = try PersistentOperationQueue(directory: storeURL)
    queue.register(RunStep.self)
    let broken = RunStep(payload: Step(name: "create broken album", fails: true))
    let orphan = RunStep(payload: Step(name: "upload to broken album"))
    orphan.addDependency(broken)
    try queue.addOperations([broken, orphan])
    queue.waitUntilAllOperationsAreFinished()
    let failed = try queue.failedOperations()
    for record in failed {
        print(record.id, record.failedPrerequisite.map { "failed with \($0)" } ?? record.reason)
    }
    precondition(failed.count == 2)
    precondition(!trace.all.contains("upload to broken album"))
    queue.close()
}
try? FileManager.default.removeItem(at: storeURL)
print("done")
