// fleet-chaos-worker: one worker process of the fleet chaos test (FleetChaosTests). It claims
// from a FleetStore, "runs" each claim (a short pause), completes it, and appends what it did
// to an effects log shared by every worker. The test kills it with SIGKILL at random moments,
// pauses it with SIGSTOP past its leases, and restarts the server under it.
//
//     fleet-chaos-worker --port 5432 --schema s --log effects.log --name w3 [--lease-ms 2000] [--work-us 300]
//
// Effects log lines (each one `write` to a file opened with O_APPEND, whole or not at all when
// the process is killed):
//     claimed <id> <attempt> <name>    after the claim committed
//     ran <id> <attempt> <name>        after the work, before `complete`
//     done <id> <attempt> <name>       `complete` was accepted
//     fenced <id> <attempt> <name>     `complete` was refused (leaseLost)
import Foundation
import Logging
import PostgresNIO
import RetryingOperationPostgreSQL

#if canImport(Glibc)
import Glibc
#endif

struct Options {
    var port = 5432
    var schema = ""
    var log = ""
    var name = ""
    var leaseMilliseconds = 2000
    var workMicroseconds: UInt32 = 300

    init(_ arguments: [String]) {
        var iterator = arguments.dropFirst().makeIterator()
        while let flag = iterator.next() {
            guard let value = iterator.next() else { fatalError("\(flag) needs a value") }
            switch flag {
            case "--port": port = Int(value) ?? port
            case "--schema": schema = value
            case "--log": log = value
            case "--name": name = value
            case "--lease-ms": leaseMilliseconds = Int(value) ?? leaseMilliseconds
            case "--work-us": workMicroseconds = UInt32(value) ?? workMicroseconds
            default: fatalError("unknown option \(flag)")
            }
        }
        precondition(!schema.isEmpty && !log.isEmpty && !name.isEmpty, "--schema, --log and --name are required")
    }
}

/// The shared effects log: each line one `write` with O_APPEND.
struct EffectsLog: Sendable {
    let descriptor: Int32

    init(path: String) {
        descriptor = open(path, O_WRONLY | O_APPEND | O_CREAT, 0o644)
        precondition(descriptor >= 0, "cannot open \(path)")
    }

    func append(_ lines: [String]) {
        guard !lines.isEmpty else { return }
        let text = lines.map { $0 + "\n" }.joined()
        let written = text.utf8CString.withUnsafeBufferPointer { write(descriptor, $0.baseAddress, $0.count - 1) }
        precondition(written == text.utf8.count, "short write to the effects log")
    }
}

let options = Options(CommandLine.arguments)
let log = EffectsLog(path: options.log)
let client = PostgresClient(configuration: .init(
    host: "127.0.0.1", port: options.port, username: "postgres", password: nil, database: "postgres", tls: .disable
))
var configuration = FleetStore.Configuration()
configuration.schema = options.schema
configuration.leaseDuration = .milliseconds(options.leaseMilliseconds)
// Not what this test is about: kills at random must not move innocent operations aside.
configuration.crashLoopLimit = 1_000
var logger = Logger(label: "fleet-chaos-worker")
logger.logLevel = .critical
let store = FleetStore(client: client, configuration: configuration, logger: logger)

await withDiscardingTaskGroup { group in
    group.addTask { await client.run() }
    while true {
        do {
            let claims = try await store.claim(worker: options.name, limit: 8)
            if claims.isEmpty {
                try await store.waitForWork(atMost: .seconds(1))
                continue
            }
            log.append(claims.map { "claimed \($0.id) \($0.attempt) \(options.name)" })
            for claim in claims {
                usleep(options.workMicroseconds)
                log.append(["ran \(claim.id) \(claim.attempt) \(options.name)"])
                do {
                    try await store.complete(claim)
                    log.append(["done \(claim.id) \(claim.attempt) \(options.name)"])
                } catch let error as FleetError where error.code == .leaseLost {
                    log.append(["fenced \(claim.id) \(claim.attempt) \(options.name)"])
                }
            }
        } catch {
            // The server restarting, a connection lost: try again shortly.
            try? await Task.sleep(for: .milliseconds(100))
        }
    }
}
