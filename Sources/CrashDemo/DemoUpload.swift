import Foundation
import PersistentOperations

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// What a simulated upload does, attempt by attempt.
enum UploadBehaviour: String, Codable, Sendable, CaseIterable {
    /// Succeeds on its first attempt.
    case succeeds
    /// Fails transiently twice (counted retries with backoff), then succeeds.
    case flaky
    /// Waits twice for a condition ("network is back": uncounted retries), then succeeds.
    case waitsForNetwork
    /// Is refused by the server: fails for good on its first attempt.
    case refused
    /// Kills its own process on every attempt (for crash-loop protection).
    case crashesTheApp
    /// Gets its process SIGKILLed on every attempt, as iOS kills an app that uses too much
    /// memory (jetsam) or hangs (watchdog): no crash signal anyone can witness.
    case killsTheApp

    /// The behaviour of operation `index` in a run of the demo or of the crash tests.
    static func forIndex(_ index: Int) -> UploadBehaviour {
        [.succeeds, .flaky, .waitsForNetwork, .succeeds, .flaky, .refused][index % 6]
    }
}

struct UploadJob: Codable, Sendable {
    var index: Int
    var behaviour: UploadBehaviour
    /// Milliseconds one attempt takes.
    var attemptMilliseconds: Int
}

/// The effects journal: one line per event, appended and synced before the app goes on, so
/// that a SIGKILL right after a line cannot lose it.
enum Effects {
    // Written once in `open`, before any operation runs; read-only afterwards.
    nonisolated(unsafe) private static var descriptor: Int32 = -1
    private static let lock = NSLock()

    static func open(_ path: String) throws {
        let fd = Foundation.open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw DemoError("cannot open the effects file \(path): errno \(errno)") }
        descriptor = fd
    }

    static func write(_ line: String) {
        lock.lock()
        defer { lock.unlock() }
        let bytes = Array((line + "\n").utf8)
        _ = bytes.withUnsafeBytes { Foundation.write(descriptor, $0.baseAddress, $0.count) }
        _ = fsync(descriptor)
    }
}

struct DemoError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

struct ServerBusy: Error, CustomStringConvertible {
    var description: String { "503 server busy" }
}

struct UploadRefused: Error, CustomStringConvertible {
    var description: String { "403 upload refused" }
}

/// A simulated upload: a persistent, asynchronous retrying operation.
final class DemoUpload: RetryingOperation, PersistentOperation, @unchecked Sendable {
    static let persistenceIdentifier = "demo.upload"
    let payload: UploadJob

    init(payload: UploadJob) {
        self.payload = payload
        super.init()
        retryPolicy = RetryPolicy(retryLimit: .maximum(5), backoff: .exponential(initial: 0.05, multiplier: 2), maximumDelay: 0.4, jitter: .none)
    }

    override var isAsynchronous: Bool { true }

    override func startBaseOperation(isRetry: Bool) {
        let attempt = numberOfAttempts
        let retries = numberOfRetries ?? 0
        Effects.write("start \(payload.index) attempt=\(attempt) retries=\(retries) retry=\(isRetry) pid=\(getpid())")
        if payload.behaviour == .crashesTheApp {
            // A poison operation: a Swift runtime trap, as a bug in an operation would cause
            // (SIGILL or SIGTRAP, which the queue's crash-signal handler witnesses).
            fatalError("upload \(payload.index) crashes the app")
        }
        if payload.behaviour == .killsTheApp {
            // A poison operation the system kills the app for: SIGKILL, which no handler sees.
            kill(getpid(), SIGKILL)
        }
        DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(payload.attemptMilliseconds)) { [self] in
            switch payload.behaviour {
            case .succeeds, .crashesTheApp, .killsTheApp:
                complete()
            case .flaky where attempt < 3:
                Effects.write("retry \(payload.index) counted")
                baseOperationEnded(withRetriableError: ServerBusy())
            case .waitsForNetwork where attempt < 3:
                Effects.write("retry \(payload.index) uncounted")
                baseOperationEnded(needsRetryIn: 0.1, countsTowardRetryLimit: false)
            case .flaky, .waitsForNetwork:
                complete()
            case .refused:
                Effects.write("fail \(payload.index)")
                baseOperationEnded(failingWith: UploadRefused())
            }
        }
    }

    private func complete() {
        Effects.write("done \(payload.index)")
        baseOperationEnded()
    }
}
