// What the metrics integration costs a queue's work: durable add → attempt succeeds → record
// removed, for `count` operations on one queue, with and without a
// `PersistentOperationQueueMetrics` observing the queue (swift-metrics' no-op backend, so
// what is measured is the integration's own work: the event delivery, the subjects, the
// metric look-ups). Measured with both durabilities, against a queue no one else listens to
// (M1, M1.process: the metrics pay for the events' delivery) and against one whose app
// already has an event handler (M1.handler, M1.process.handler). Rounds alternate (the side that goes first alternates too); the ratio is
// the median of the rounds' ratios. Run in release:
//
//     swift run -c release --package-path Integrations/Metrics metrics-overhead [count] [rounds]
import CoreMetrics
import Foundation
import PersistentOperations
import PersistentOperationsMetrics

final class Job: RetryingOperation, PersistentOperation, @unchecked Sendable {
    struct Payload: Codable, Sendable { var number: Int }
    static let persistenceIdentifier = "metrics-overhead.job"
    let payload: Payload
    init(payload: Payload) {
        self.payload = payload
        super.init()
    }
    override var isAsynchronous: Bool { false }
    override func startBaseOperation(isRetry: Bool) {
        baseOperationEnded()
    }
}

func timeRound(count: Int, durability: PersistentOperationQueue.Durability, withAppHandler: Bool, withMetrics: Bool) throws -> Double {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("metrics-overhead-\(UUID().uuidString)")
    defer { try? FileManager.default.removeItem(at: directory) }
    var configuration = PersistentOperationQueue.Configuration()
    configuration.durability = durability
    let queue = try PersistentOperationQueue(directory: directory, operationQueue: OperationQueue(), configuration: configuration)
    queue.register(Job.self)
    if withAppHandler { queue.eventHandler = { _ in } }
    let metrics = withMetrics ? PersistentOperationQueueMetrics(queue: queue, gaugeInterval: nil, factory: NOOPMetricsHandler.instance) : nil
    let start = DispatchTime.now().uptimeNanoseconds
    for number in 0..<count {
        _ = try queue.addOperation(Job(payload: .init(number: number)), options: EnqueueOptions())
    }
    queue.operationQueue.waitUntilAllOperationsAreFinished()
    while try queue.counts().pending > 0 { usleep(100) }
    let seconds = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
    metrics?.stop()
    queue.close()
    return seconds
}

func median(_ values: [Double]) -> Double {
    let sorted = values.sorted()
    return sorted.count % 2 == 1 ? sorted[sorted.count / 2] : (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2
}

let arguments = CommandLine.arguments.dropFirst().compactMap { Int($0) }
let count = arguments.first ?? 20_000
let rounds = arguments.dropFirst().first ?? 9
let cases: [(id: String, durability: PersistentOperationQueue.Durability, withAppHandler: Bool)] = [
    ("M1", .flushed, false), ("M1.process", .processCrash, false), ("M1.handler", .flushed, true), ("M1.process.handler", .processCrash, true),
]
for (id, durability, withAppHandler) in cases {
    _ = try timeRound(count: count / 10, durability: durability, withAppHandler: withAppHandler, withMetrics: true)   // warm-up
    var ratios: [Double] = []
    var plain: [Double] = []
    var observed: [Double] = []
    for index in 0..<rounds {
        let (without, with): (Double, Double)
        if index.isMultiple(of: 2) {
            without = try timeRound(count: count, durability: durability, withAppHandler: withAppHandler, withMetrics: false)
            with = try timeRound(count: count, durability: durability, withAppHandler: withAppHandler, withMetrics: true)
        } else {
            with = try timeRound(count: count, durability: durability, withAppHandler: withAppHandler, withMetrics: true)
            without = try timeRound(count: count, durability: durability, withAppHandler: withAppHandler, withMetrics: false)
        }
        plain.append(without)
        observed.append(with)
        ratios.append(with / without)
    }
    print(String(
        format: "%@: %d × add → success → removal, durability .%@, %@: without metrics %.3f s, with metrics (no-op backend) %.3f s, ratio %.3f× (median of %d interleaved rounds; target ≤ 1.05×)",
        id, count, durability == .flushed ? "flushed" : "processCrash",
        withAppHandler ? "the app already handles events" : "no other event listener",
        median(plain), median(observed), median(ratios), rounds
    ))
}
