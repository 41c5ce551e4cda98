import Foundation
import PersistentOperations

/// One durable add and one removal, for tracing the system calls they make
/// (`strace -f -e trace=openat,write,fsync,rename,unlink … crash-demo durability-probe`).
///
///     crash-demo durability-probe --store DIR
///
/// Prints `added ID` once `addOperation` returned and `removed ID` once the queue reported
/// the record removed, so a trace shows what happened on disk before each.
struct DurabilityProbeCommand {
    var store: URL

    func run() throws {
        let queue = try PersistentOperationQueue(directory: store)
        queue.register(ProbeOperation.self)
        let removed = DispatchSemaphore(value: 0)
        queue.eventHandler = { event in
            if case .succeeded(let id) = event {
                FileHandle.standardOutput.write(Data("removed \(id)\n".utf8))
                removed.signal()
            }
        }
        queue.isSuspended = true
        let result = try queue.addOperation(ProbeOperation(payload: "probe"), options: EnqueueOptions())
        FileHandle.standardOutput.write(Data("added \(result.id)\n".utf8))
        queue.isSuspended = false
        removed.wait()
        queue.close()
    }
}

/// An operation that does nothing, so the trace holds only the store's own calls.
final class ProbeOperation: Operation, PersistentOperation, @unchecked Sendable {
    // @unchecked: `payload` is immutable.
    static let persistenceIdentifier = "demo.probe"
    let payload: String

    init(payload: String) {
        self.payload = payload
    }
}
