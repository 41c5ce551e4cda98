import Foundation
import Testing
@testable import PersistentOperations

/// An upload that needs a service its payload cannot hold.
final class ServiceUpload: RetryingOperation, PersistentOperation, @unchecked Sendable {
    static let persistenceIdentifier = "test.service-upload"
    let payload: UploadPayload
    let service: String

    convenience init(payload: UploadPayload) {
        self.init(payload: payload, service: "no service")
    }

    init(payload: UploadPayload, service: String) {
        self.payload = payload
        self.service = service
        super.init()
    }

    override var isAsynchronous: Bool { false }

    override func startBaseOperation(isRetry: Bool) {
        Journal.record(payload.journal, "\(payload.name) via \(service)")
        baseOperationEnded()
    }
}

@Suite("Persistent queue: registering a factory", .timeLimit(.minutes(1)))
struct FactoryRegistrationTests {
    @Test func restoredOperationsAreBuiltByTheRegisteredFactory() async throws {
        // Given a launch that left an operation pending
        let directory = try TemporaryDirectory()
        let journal = UUID().uuidString
        do {
            let fixture = try QueueFixture(suspended: true, directory: directory, journal: journal)
            fixture.queue.register(ServiceUpload.self)
            try fixture.queue.addOperation(ServiceUpload(payload: UploadPayload(name: "left", journal: journal), service: "first launch"))
            fixture.queue.close()
        }
        // When the next launch registers the type with a factory and restores
        let fixture = try QueueFixture(directory: directory, journal: journal)
        let calls = Locked(0)
        fixture.queue.register(ServiceUpload.self) { payload in
            calls.withLock { $0 += 1 }
            return ServiceUpload(payload: payload, service: "the API client")
        }
        try fixture.queue.restore()
        await fixture.queue.allOperationsFinished()
        // Then the factory built it, once, with the service
        #expect(fixture.lines == ["left via the API client"])
        #expect(calls.withLock { $0 } == 1)
    }

    @Test func aWaitingOperationTheAppLetGoOfIsBuiltAgainByTheFactory() async throws {
        // Given a factory, and an operation added to wait 10 s that the app does not keep
        let fixture = try QueueFixture()
        fixture.queue.register(ServiceUpload.self) { ServiceUpload(payload: $0, service: "factory") }
        weak var added: ServiceUpload?
        do {
            let upload = ServiceUpload(payload: UploadPayload(name: "later", journal: fixture.journal), service: "caller")
            added = upload
            try fixture.queue.addOperation(upload, options: EnqueueOptions(notBefore: fixture.clock.now.addingTimeInterval(10)))
        }
        #expect(added == nil)
        // When it is due
        fixture.clock.advance(by: 10)
        await fixture.queue.allOperationsFinished()
        // Then the operation that ran was built by the factory
        #expect(fixture.lines == ["later via factory"])
    }
}

/// A service the README's factory example hands to the operations it builds.
final class Uploader: Sendable {
    let server: String
    init(server: String) { self.server = server }
    func upload(_ file: String) -> String { "\(file) to \(server)" }
}

/// An upload that uses the app's ``Uploader`` (the README's factory example).
final class ServiceBackedUpload: RetryingOperation, PersistentOperation, @unchecked Sendable {
    static let persistenceIdentifier = "com.example.service-backed-upload"
    let payload: Upload
    let uploader: Uploader

    convenience init(payload: Upload) {
        self.init(payload: payload, uploader: Uploader(server: "https://default.example.com"))
    }

    init(payload: Upload, uploader: Uploader) {
        self.payload = payload
        self.uploader = uploader
        super.init()
    }

    override var isAsynchronous: Bool { false }

    override func startBaseOperation(isRetry: Bool) {
        let sent = uploader.upload(payload.file)
        DocumentationServer.uploaded.withLock { $0.append(sent) }
        baseOperationEnded()
    }
}

@Suite("Documentation examples (factories)", .timeLimit(.minutes(1)))
struct FactoryDocumentationTests {
    @Test func theReadmeFactoryHandsItsServiceToRestoredOperations() async throws {
        let temporary = try TemporaryDirectory()
        do {
            let operationQueue = OperationQueue()
            operationQueue.isSuspended = true
            let earlier = try PersistentOperationQueue(directory: temporary.store, operationQueue: operationQueue)
            earlier.register(ServiceBackedUpload.self)
            try earlier.addOperation(ServiceBackedUpload(payload: Upload(file: "IMG_9001.heic", album: 90)))
            earlier.close()
        }
        let queue = try PersistentOperationQueue(directory: temporary.store)
        // snippet: register-factory
        let uploader = Uploader(server: "https://uploads.example.com")   // the app's service
        queue.register(ServiceBackedUpload.self) { payload in
            ServiceBackedUpload(payload: payload, uploader: uploader)     // instead of init(payload:)
        }
        try queue.restore()
        // end snippet
        await queue.allOperationsFinished()
        #expect(DocumentationServer.uploaded.withLock { $0.contains("IMG_9001.heic to https://uploads.example.com") })
    }
}
