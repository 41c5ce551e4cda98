import Foundation
import Testing
import RetryingOperation

// The code samples of the DocC articles in Sources/RetryingOperation/RetryingOperation.docc,
// compiled and run here so they cannot rot. `scripts/readme-snippets.py --check` fails when
// an article's sample differs from its `// snippet:` region below.

// MARK: - Writing a retrying operation

/// Stands in for the app's reachability monitor.
final class FakeNetwork: Sendable {
    private let reachable: LockedBox<Bool>
    init(isReachable: Bool) { reachable = LockedBox(isReachable) }
    var isReachable: Bool {
        get { reachable.withLock { $0 } }
        set { reachable.withLock { $0 = newValue } }
    }
}

/// Stands in for a sync server that fails `failures` times.
final class FakeSyncServer: Sendable {
    private let failuresLeft: LockedBox<Int>
    init(failures: Int) { failuresLeft = LockedBox(failures) }
    func sync() throws {
        let fails = failuresLeft.withLock { left -> Bool in
            defer { left -= 1 }
            return left > 0
        }
        if fails { throw ServerBusy() }
    }
}

// snippet: docs-uncounted-retry
final class SyncOperation: RetryingOperation, @unchecked Sendable {
    // @unchecked: the stored properties are constants.
    let network: FakeNetwork
    let server: FakeSyncServer

    init(network: FakeNetwork, server: FakeSyncServer) {
        self.network = network
        self.server = server
        super.init()
    }

    override var isAsynchronous: Bool { false }

    override func startBaseOperation(isRetry: Bool) {
        guard network.isReachable else {
            // Waiting for the network is not a failure of the sync: don't spend a retry.
            baseOperationEnded(needsRetryIn: 30, countsTowardRetryLimit: false)
            return
        }
        do {
            try server.sync()
            baseOperationEnded()
        } catch {
            baseOperationEnded(withRetriableError: error)
        }
    }
}
// end snippet

// MARK: - Wrapping operations you don't own

struct DownloadError: Error {
    var isTransient: Bool
}

/// Stands in for the network layer of a module we don't own.
final class FakeTransport: Sendable {
    private let answers: LockedBox<[Result<Data, DownloadError>]>
    init(answers: [Result<Data, DownloadError>]) { self.answers = LockedBox(answers) }
    func fetch(_ url: URL) -> Result<Data, DownloadError> {
        answers.withLock { $0.count > 1 ? $0.removeFirst() : $0[0] }
    }
}

/// An `Operation` subclass from another module: it downloads once and keeps what happened.
/// Declared as frameworks declare theirs: not final (`open`, in its own module) and with a
/// designated initializer that is not `required`, so that no extension can build `Self`.
class DownloadOperation: Operation, @unchecked Sendable {
    // @unchecked: `data` and `error` are written by `main()` and read after the operation finished.
    let url: URL
    let transport: FakeTransport
    private(set) var data: Data?
    private(set) var error: DownloadError?

    init(url: URL, transport: FakeTransport) {
        self.url = url
        self.transport = transport
    }

    override func main() {
        switch transport.fetch(url) {
        case .success(let data): self.data = data
        case .failure(let error): self.error = error
        }
    }
}

// snippet: docs-retryable-conformance
// DownloadOperation is a framework's open class: a final subclass conforms, since its `Self`
// is the subclass itself, which its inherited initializer builds.
final class RetryableDownload: DownloadOperation, RetryableOperation, @unchecked Sendable {
    // @unchecked: it adds no state to DownloadOperation.
    func retryHelpers<T>(from wrapper: RetryableOperationWrapper<T>) -> [RetryHelper]? {
        guard let error, error.isTransient else { return nil }   // nil: done, don't retry
        return [RetryingOperation.TimerRetryHelper(retryDelay: 2, retryingOperation: wrapper)]
    }

    func operationForRetrying() throws -> RetryableDownload {
        RetryableDownload(url: url, transport: transport)   // a fresh operation: an Operation runs only once
    }
}
// end snippet

// MARK: - Migrating from the earlier library

/// An upload written for the earlier library: it limits its retries itself, and gives up
/// by ending "successfully".
final class EarlierStyleUpload: RetryingOperation, @unchecked Sendable {
    // @unchecked: the stored properties are constants.
    let file: URL
    let uploader: FakeUploader
    init(file: URL, uploader: FakeUploader) {
        self.file = file
        self.uploader = uploader
    }

    override var isAsynchronous: Bool { true }

    // snippet: docs-migration-before
    override func startBaseOperation(isRetry: Bool) {
        uploader.upload(file) { result in
            switch result {
            case .success:
                self.baseOperationEnded()
            case .failure where (self.numberOfRetries ?? 0) < 3:
                self.baseOperationEnded(needsRetryIn: 2)
            case .failure:
                self.baseOperationEnded()   // gave up, but the queue can't tell
            }
        }
    }
    // end snippet
}

/// The same upload, migrated: the policy limits the retries and the outcome tells.
final class MigratedUpload: RetryingOperation, @unchecked Sendable {
    // @unchecked: the stored properties are constants.
    let file: URL
    let uploader: FakeUploader

    // snippet: docs-migration-after
    init(file: URL, uploader: FakeUploader) {
        self.file = file
        self.uploader = uploader
        super.init()
        retryPolicy = .constant(2, retryLimit: .maximum(3))
    }

    override var isAsynchronous: Bool { true }

    override func startBaseOperation(isRetry: Bool) {
        uploader.upload(file) { result in
            switch result {
            case .success:
                self.baseOperationEnded()
            case .failure(let error):
                self.baseOperationEnded(withRetriableError: error)   // the policy decides
            }
        }
    }
    // end snippet
}

@Suite(.timeLimit(.minutes(1)))
struct DocumentationExampleTests {
    let photo = URL(fileURLWithPath: "/tmp/photo.jpg")

    @Test func runningAnOperationAndReadingItsOutcome() async {
        let uploader = FakeUploader(failures: 0)
        // snippet: docs-run
        let queue = OperationQueue()
        let upload = UploadOperation(file: photo, uploader: uploader)
        queue.addOperation(upload)
        // end snippet
        #expect(await upload.finalOutcome.isSuccess)
    }

    @Test func choosingARetryPolicy() {
        let upload = UploadOperation(file: photo, uploader: FakeUploader(failures: 0))
        // snippet: docs-policy
        upload.retryPolicy = RetryPolicy(
            retryLimit: .maximum(5),
            backoff: .exponential(initial: 0.5, multiplier: 2),
            maximumDelay: 30,
            jitter: .equal
        )
        upload.retryPolicy = .interactive                          // 3 quick retries
        upload.retryPolicy = .constant(2, retryLimit: .maximum(3)) // every 2 s, at most 3 times
        // end snippet
        #expect(upload.retryPolicy == .constant(2, retryLimit: .maximum(3)))
    }

    @Test func uncountedRetriesWaitForTheNetworkWithoutSpendingTheBudget() async {
        // Given a sync that is offline at first, under a policy that allows no retry
        let clock = ManualRetryScheduler()
        let network = FakeNetwork(isReachable: false)
        let sync = SyncOperation(network: network, server: FakeSyncServer(failures: 0))
        sync.retryPolicy = .never
        sync.retryScheduler = clock
        makeQueue().addOperation(sync)
        // When the network comes back during the uncounted wait
        await clock.waitForScheduledRetries(count: 1)
        #expect(clock.pendingDelays == [30])
        network.isReachable = true
        clock.advance(by: 30)
        // Then the sync succeeds on its second attempt
        #expect(await sync.finalOutcome.isSuccess)
        #expect(sync.numberOfAttempts == 2)
    }

    @Test func retryingAClosure() async {
        let network = FakeNetwork(isReachable: true)
        let server = FakeSyncServer(failures: 0)
        // snippet: docs-async-body
        let sync = AsyncRetryingOperation(retryPolicy: .interactive) { attempt in
            guard network.isReachable else {
                throw RetryRequest.after(30, countsTowardRetryLimit: false)   // wait; don't spend a retry
            }
            try server.sync()
        }
        // end snippet
        sync.start()
        #expect(await sync.finalOutcome.isSuccess)
    }

    @Test func loggingThroughAHandler() async {
        let lines = LockedBox<[String]>([])
        let upload = UploadOperation(file: photo, uploader: FakeUploader(failures: 1))
        upload.name = "upload"
        upload.retryPolicy = .constant(0.001, retryLimit: .maximum(1))
        // snippet: docs-log-handler
        upload.logHandler = RetryLogHandler(minimumLevel: .info) { message in
            print("\(message.operationDescription): \(message.text)")
        }
        // end snippet
        upload.logHandler = RetryLogHandler(minimumLevel: .info) { message in
            lines.withLock { $0.append("\(message.operationDescription): \(message.text)") }
        }
        upload.start()
        #expect(await upload.finalOutcome.isSuccess)
        #expect(lines.withLock { $0 }.contains { $0.hasPrefix("upload: attempt failed") })
    }

    @Test func wrappingAnOperationYouDontOwn() async throws {
        let url = try #require(URL(string: "https://example.com/report.pdf"))
        let transport = FakeTransport(answers: [.success(Data("report".utf8))])
        func save(_ data: Data) { #expect(data == Data("report".utf8)) }
        // snippet: docs-wrapper-use
        let queue = OperationQueue()
        let download = RetryableDownload(url: url, transport: transport)   // the subclass, not DownloadOperation
        let wrapper = RetryableOperationWrapper(baseOperation: download, retryLimit: .maximum(3))
        queue.addOperation(wrapper)

        switch await wrapper.finalOutcome {
        case .succeeded:
            // The wrapper's work is done; the last download says how it went.
            if let data = wrapper.currentBaseOperation.data { save(data) }
        case .failed(let error):
            print("gave up: \(error)")   // retryLimitReached, or what operationForRetrying() threw
        case .cancelled:
            break
        }
        // end snippet
        #expect(wrapper.outcome?.isSuccess == true)
    }

    @Test func wrapperRetriesTransientErrorsOnTheTestClock() async {
        let clock = ManualRetryScheduler()
        let transport = FakeTransport(answers: [.failure(DownloadError(isTransient: true)), .success(Data())])
        let wrapper = RetryableOperationWrapper(baseOperation: RetryableDownload(url: photo, transport: transport), retryLimit: .maximum(3))
        wrapper.retryScheduler = clock
        makeQueue().addOperation(wrapper)
        await clock.waitForScheduledRetries(count: 1)
        #expect(clock.pendingDelays == [2])
        clock.advance(by: 2)
        #expect(await wrapper.finalOutcome.isSuccess)
        #expect(wrapper.currentBaseOperation.data == Data())
    }

    @Test func aNegativeRetryLimitAllowsNoRetryInsteadOfTrapping() async {
        // Given a wrapper built with a negative maximum (a value read from a configuration file),
        // whose download fails with a transient error
        let clock = ManualRetryScheduler()
        let transport = FakeTransport(answers: [.failure(DownloadError(isTransient: true)), .success(Data())])
        let wrapper = RetryableOperationWrapper(baseOperation: RetryableDownload(url: photo, transport: transport), retryLimit: .maximum(-2))
        wrapper.retryScheduler = clock
        makeQueue().addOperation(wrapper)
        // Then it gives up after the first attempt, as a policy with `.maximum(0)` does
        #expect((await wrapper.finalOutcome.error as? RetryingOperationError)?.code == .retryLimitReached)
        #expect(wrapper.numberOfAttempts == 1)
        #expect(wrapper.maximumNumberOfRetries == 0)
    }

    @Test func aFinalSubclassMakesANonFinalOperationClassRetryableWithAFreshCopyPerRetry() async {
        // Given the final subclass of a framework's non-final download operation, failing
        // twice with a transient error
        let clock = ManualRetryScheduler()
        let transport = FakeTransport(answers: [.failure(DownloadError(isTransient: true)),
                                                .failure(DownloadError(isTransient: true)), .success(Data("ok".utf8))])
        let original = RetryableDownload(url: photo, transport: transport)
        let wrapper = RetryableOperationWrapper(baseOperation: original, retryLimit: .maximum(3))
        wrapper.retryScheduler = clock
        makeQueue().addOperation(wrapper)

        // When its retries come due
        for retry in 1...2 {
            await clock.waitForTotalScheduledRetries(count: retry)
            clock.advance(by: 2)
        }

        // Then each retry ran a new instance of the subclass, built by operationForRetrying()
        #expect(await wrapper.finalOutcome.isSuccess)
        #expect(wrapper.numberOfRetries == nil)   // finished
        #expect(wrapper.originalBaseOperation === original)
        #expect(wrapper.currentBaseOperation !== original)
        #expect(wrapper.currentBaseOperation.data == Data("ok".utf8))
        #expect(original.error?.isTransient == true && original.data == nil)
    }

    // snippet: docs-test-clock
    @Test func uploadRetriesTwiceThenGivesUp() async {
        // Given an upload to a server that stays busy, on a test clock
        let clock = ManualRetryScheduler()
        let upload = UploadOperation(file: URL(fileURLWithPath: "/tmp/report.pdf"), uploader: FakeUploader(failures: 100))
        upload.retryPolicy = .constant(10, retryLimit: .maximum(2))
        upload.retryScheduler = clock

        // When it runs, and each retry comes due
        let queue = OperationQueue()
        queue.addOperation(upload)
        for _ in 1...2 {
            await clock.waitForScheduledRetries(count: 1)   // an attempt failed
            #expect(clock.pendingDelays == [10])
            clock.advance(by: 10)                           // the retry runs now
        }

        // Then it gave up after three attempts, the server's error the last one's
        let error = await upload.finalOutcome.error as? RetryingOperationError
        #expect(error?.code == .retryLimitReached && error?.underlyingError is ServerBusy)
        #expect(upload.numberOfAttempts == 3)
    }
    // end snippet

    // snippet: docs-test-policy
    @Test func backoffDoublesUpToTheCap() {
        let policy = RetryPolicy(retryLimit: .maximum(5), backoff: .exponential(initial: 1, multiplier: 2),
                                 maximumDelay: 5, jitter: .none)
        #expect((1...4).map { policy.baseDelay(forRetry: $0) } == [1, 2, 4, 5])
        #expect(!policy.allowsRetry(afterRetries: 5))
    }
    // end snippet

    @Test func earlierStyleUploadGivesUpSilentlyAndTheMigratedOneFails() async {
        for migrated in [false, true] {
            let clock = ManualRetryScheduler()
            let uploader = FakeUploader(failures: 100)
            let upload: RetryingOperation = migrated ? MigratedUpload(file: photo, uploader: uploader) : EarlierStyleUpload(file: photo, uploader: uploader)
            upload.retryScheduler = clock
            makeQueue().addOperation(upload)
            for _ in 1...3 {
                await clock.waitForScheduledRetries(count: 1)
                #expect(clock.pendingDelays == [2])
                clock.advance(by: 2)
            }
            let outcome = await upload.finalOutcome
            #expect(outcome.isSuccess == !migrated)
            #expect(upload.numberOfAttempts == 4)
        }
    }

    @Test func migratingTheWrapperLimit() {
        let download = RetryableDownload(url: photo, transport: FakeTransport(answers: [.success(Data())]))
        // snippet: docs-migration-wrapper
        // Earlier library: -1 means "no limit" (still compiles, still works)
        let before = RetryableOperationWrapper(maximumNumberOfRetries: -1, baseOperation: download)
        // Now: say it
        let after = RetryableOperationWrapper(baseOperation: download, retryLimit: .unlimited)
        // end snippet
        #expect(before.maximumNumberOfRetries == after.maximumNumberOfRetries)
    }
}
