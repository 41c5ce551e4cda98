// What the documentation examples of `RetryingOperation` leave undefined: the app's own
// objects they talk about, stubbed with the types the prose implies. Used by
// scripts/doc-examples.py; never run.
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import RetryingOperation

/// Examples written inside a subclass (they call `baseOperationEnded()`, pass `self`) run in
/// a subclass of this.
class ExampleOperation: RetryingOperation, @unchecked Sendable {
    override var isAsynchronous: Bool { true }
}

struct UploadError: Error { static let fileTooLarge = UploadError() }
struct ServerBusy: Error {}
extension Error { var isTransient: Bool { false } }
extension Notification.Name { static let networkIsBack = Notification.Name("networkIsBack") }

final class Uploader: Sendable {
    func upload(_ file: URL, completion: @escaping @Sendable (Result<Void, any Error>) -> Void) {}
    func cancel(_ file: URL) {}
    /// Uploads from byte `offset` on, telling `sent` how many bytes are there so far.
    func upload(
        _ file: URL, from offset: Int64, sent: @escaping @Sendable (Int64) -> Void,
        completion: @escaping @Sendable (Result<Void, any Error>) -> Void
    ) {}
}
final class API: Sendable {
    func sync() async throws {}
    func sync(since: Date) async throws {}
    func upload(_ file: URL) async throws {}
}
struct Network: Sendable { var isReachable: Bool { true } }
final class Logger: Sendable {
    func log(_ text: String) {}
    func info(_ text: String) {}
}
final class Store: Sendable { func flush() throws {} }
final class Reachability: @unchecked Sendable { var onReachable: (() -> Void)? }

final class UploadOperation: RetryingOperation, @unchecked Sendable {
    let file: URL
    init(file: URL) { self.file = file; super.init() }
    override var isAsynchronous: Bool { true }
}

/// A framework's operation class: not final, its initializer not `required` (so an example
/// cannot build `Self` of it).
class DownloadOperation: Operation, @unchecked Sendable {
    let request: URLRequest
    var error: (any Error)?
    init(request: URLRequest) { self.request = request; super.init() }
}

/// The retryable subclass that `RetryableOperation`'s documentation declares.
final class RetryableDownload: DownloadOperation, RetryableOperation, @unchecked Sendable {
    func retryHelpers<T>(from wrapper: RetryableOperationWrapper<T>) -> [RetryHelper]? { nil }
    func operationForRetrying() throws -> RetryableDownload { RetryableDownload(request: request) }
}

final class NetworkIsBackRetryHelper: RetryHelper {
    init(operation: RetryingOperation) {}
    func setup() {}
    func teardown() {}
}

struct NoScheduledRetry: ScheduledRetry {
    func cancel() {}
}

var queue: OperationQueue { OperationQueue() }
var operation: RetryingOperation { UploadOperation(file: file) }
var upload: UploadOperation { UploadOperation(file: file) }
var download: RetryableDownload { RetryableDownload(request: request) }
var request: URLRequest { URLRequest(url: URL(string: "https://example.com/file")!) }
var file: URL { URL(fileURLWithPath: "/tmp/photo.jpg") }
var fileSize: Int64 { 1_000_000 }
var photos: [URL] { [file] }
var clock: ManualRetryScheduler { ManualRetryScheduler() }
var uploader: Uploader { Uploader() }
var api: API { API() }
var network: Network { Network() }
var logger: Logger { Logger() }
var store: Store { Store() }
var reachability: Reachability { Reachability() }
var task: Task<Void, Never>? { nil }
var lastSync: Date { Date() }
var retryAfter: TimeInterval { 60 }
func showDone() {}
func show(_ error: any Error) {}
func report(_ error: any Error) {}
