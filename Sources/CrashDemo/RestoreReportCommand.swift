import Foundation
import RetryingOperation
import PersistentOperations

/// Restores a store and builds every restored operation (decoding its payload, which a restore
/// itself does not), without running anything, and prints what happened as JSON, so a test
/// can feed a store of damaged files to a process of its own: if anything in restoring or
/// building trapped, the child would die, not the test runner.
///
///     crash-demo restore-report --store DIR
///
/// Output: `{"restored": [ID], "quarantined": [{"name", "reason"}], "newerFormatVersions":
/// [{"name", "reason"}], "unknownTypes": [ID], "movedToFailedAfterCrashes": [ID], "expired": [ID]}`.
/// `quarantined` lists what the restore quarantined, then the records whose operations could
/// not be built (their payloads do not decode), which `restored` then leaves out.
struct RestoreReportCommand {
    var store: URL

    struct Output: Encodable {
        struct Entry: Encodable {
            var name: String
            var reason: String
        }

        var restored: [String]
        var quarantined: [Entry]
        var newerFormatVersions: [Entry]
        var unknownTypes: [String]
        var movedToFailedAfterCrashes: [String]
        var expired: [String]
    }

    func run() throws {
        let operationQueue = OperationQueue()
        operationQueue.isSuspended = true
        let queue = try PersistentOperationQueue(directory: store, operationQueue: operationQueue)
        queue.register(DemoUpload.self)
        let quarantinedWhenBuilt = Locked<[Output.Entry]>([])
        let report = try queue.restore()
        queue.eventHandler = { event in
            if case .quarantined(let name, let reason) = event {
                quarantinedWhenBuilt.withLock { $0.append(Output.Entry(name: name, reason: reason)) }
            }
        }
        // Listing the operations builds each one; those that cannot be built are quarantined.
        let built = Set(queue.operations().map(\.id))
        queue.close()
        let output = Output(
            restored: report.restored.filter(built.contains).map(\.rawValue),
            quarantined: report.quarantined.map { Output.Entry(name: $0.name, reason: $0.reason) } + quarantinedWhenBuilt.withLock { $0 },
            newerFormatVersions: report.newerFormatVersions.map { Output.Entry(name: $0.name, reason: $0.reason) },
            unknownTypes: report.unknownTypes.map(\.id.rawValue),
            movedToFailedAfterCrashes: report.movedToFailedAfterCrashes.map(\.rawValue),
            expired: report.expired.map(\.rawValue)
        )
        FileHandle.standardOutput.write(try JSONEncoder().encode(output))
        FileHandle.standardOutput.write(Data("\n".utf8))
    }
}

/// Adds `count` uploads that expire `seconds` from now and `count` that do not, all due only
/// in an hour, says so on standard output, then waits to be killed: a test then restores the
/// store after the date (`restore-report`) in another process. Its queue's timers never fire,
/// as if it were killed before they could, however slowly the machine runs: the records expire
/// at the next restore, never in this process.
///
///     crash-demo add-expiring --store DIR --count N --expires-in SECONDS
struct AddExpiringCommand {
    var store: URL
    var count: Int
    var expiresIn: TimeInterval

    func run() throws -> Never {
        let operationQueue = OperationQueue()
        operationQueue.isSuspended = true
        let queue = try PersistentOperationQueue(
            directory: store, operationQueue: operationQueue,
            configuration: PersistentOperationQueue.Configuration(scheduler: TimersThatNeverFire())
        )
        queue.register(DemoUpload.self)
        let now = Date()
        for index in 0..<(2 * count) {
            var options = EnqueueOptions(notBefore: now.addingTimeInterval(3600))
            if index < count { options.expirationDate = now.addingTimeInterval(expiresIn) }
            let job = UploadJob(index: index, behaviour: .succeeds, attemptMilliseconds: 1)
            try queue.addOperation(DemoUpload(payload: job), options: options)
        }
        FileHandle.standardOutput.write(Data("added \(2 * count)\n".utf8))
        while true { sleep(60) }
    }
}

/// A clock that reads the real time and whose timers never fire.
struct TimersThatNeverFire: RetryScheduler {
    var now: Date { Date() }

    func schedule(after delay: TimeInterval, _ action: @escaping @Sendable () -> Void) -> any ScheduledRetry {
        NeverFiring()
    }

    struct NeverFiring: ScheduledRetry {
        func cancel() {}
    }
}
