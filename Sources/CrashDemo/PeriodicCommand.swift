import Foundation
import PersistentOperations

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// An app with one periodic upload series, for the tests that kill it and launch it again:
/// restores the store, adds the series under the unique key "tick" (kept when an earlier
/// launch stored it), says "ready", then either runs until the stored series has ended
/// `untilPeriods` periods (printing its record as JSON, exit 0) or runs until killed. Each attempt writes
/// "start 0 attempt=… retry=… pid=…" and "done 0" to the effects journal.
///
///     crash-demo periodic --store DIR --effects FILE --interval SECONDS --attempt-ms MS [--until-periods N]
struct PeriodicCommand {
    var store: URL
    var effects: String
    var interval: TimeInterval
    var attemptMilliseconds: Int
    var untilPeriods: Int?

    func run() throws -> Never {
        try Effects.open(effects)
        let queue = try PersistentOperationQueue(directory: store)
        queue.register(DemoUpload.self)
        try queue.restore()
        let job = UploadJob(index: 0, behaviour: .succeeds, attemptMilliseconds: attemptMilliseconds)
        try queue.addOperation(DemoUpload(payload: job), options: EnqueueOptions(uniqueKey: "tick", repeating: .every(interval)))
        FileHandle.standardOutput.write(Data("ready\n".utf8))
        guard let untilPeriods else {
            while true { sleep(60) }
        }
        // Done once the store says so: the queue's own view of a period's end comes a moment
        // before its record is saved, and exiting in between would leave the last period to run
        // again at the next launch.
        let onDisk = try ReadOnlyPersistentStore(directory: store)
        while true {
            if let series = try onDisk.pendingRecords().records.first(where: { $0.uniqueKey == "tick" }),
               series.completedPeriods >= untilPeriods {
                let output: [String: Double] = [
                    "completedPeriods": Double(series.completedPeriods),
                    "periodTarget": series.periodTarget?.timeIntervalSinceReferenceDate ?? -1,
                    "enqueuedAt": series.enqueuedAt.timeIntervalSinceReferenceDate,
                    "interval": series.repeating?.interval ?? -1,
                ]
                FileHandle.standardOutput.write(try JSONEncoder().encode(output))
                FileHandle.standardOutput.write(Data("\n".utf8))
                queue.close()
                exit(0)
            }
            usleep(20_000)
        }
    }
}
